"""`kvdiag discover`: the defects nobody registered, found by running the whole suite under each tool.

Entry points: ``session.run_discover`` (one discovery), ``roots.group_roots`` (the one grouping
rule), ``matching.match_roots`` (known or new), ``draft.render_draft`` and ``drafting.write_drafts``
(entries from new roots), ``result.from_document`` (a saved discovery read back).
"""
