"""JUnit XML: one testsuite, one testcase per entry, for CI systems that show test reports.

Mapping (a defect is a "test" that passes when it does not reproduce):
confirmed → <failure> quoting the matched lines; inconclusive and error → <error>;
skipped and not-applicable → <skipped> with the reason; not-reproduced → passed.
The build and machine go into <properties>. The document follows the Jenkins
xunit plugin's ``junit-10.xsd`` (tests/fixtures/schemas/). Characters XML 1.0 cannot carry
(ANSI escapes and other control bytes from logs) are written as ``\\xNN``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from kvdiag.report.formats import EntryView, SweepFormatter, entry_views
from kvdiag.store.sweeps import Sweep, target_summary

_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

FAILURE = {"confirmed"}
ERROR = {"inconclusive", "error"}
SKIPPED = {"skipped", "not-applicable"}


def xml_text(value: object) -> str:
    """Text that is legal XML 1.0 (ElementTree escapes <, >, & and quotes, but not control bytes)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def _detail(v: EntryView) -> str:
    lines = [v.reason]
    if v.range:
        lines.append(f"range: {v.range}")
    if v.error_count is not None:
        lines.append(f"sanitizer errors: {v.error_count}")
    lines += [f"site: {s.site} [{s.kind}] {s.kernel}" for s in v.sites]
    lines += [f"instantiation: {i}" for i in v.instantiations[:4]]
    if v.quoted:
        lines.append("matched lines:")
        lines += [f"  {q}" for q in v.quoted]
    if v.running_case:
        lines.append(f"running when it died: {v.running_case}")
    if v.exit:
        lines.append(f"exit: {v.exit}")
    if len(v.attempts) > 1:
        lines += [f"run {i}: {verdict}: {reason}" for i, verdict, reason in v.attempts]
    lines += [f"warning: {w}" for w in v.warnings]
    if v.command:
        lines.append(f"command: {v.command}")
    return "\n".join(lines)


class JUnitFormat(SweepFormatter):
    suffix = ".xml"

    def format(self, sweep: Sweep) -> str:
        views = entry_views(sweep)
        t = target_summary(sweep.target)
        totals = {
            "tests": str(len(views)),
            "failures": str(sum(v.verdict in FAILURE for v in views)),
            "errors": str(sum(v.verdict in ERROR for v in views)),
            "skipped": str(sum(v.verdict in SKIPPED for v in views)),
            "time": f"{sweep.wall_s:.3f}",
        }
        # Jenkins' junit-10.xsd allows no `skipped` on <testsuites> (only on <testsuite>).
        root = ET.Element("testsuites", {"name": "kvdiag", **{k: v for k, v in totals.items() if k != "skipped"}})
        suite = ET.SubElement(root, "testsuite", {
            "name": "kvdiag sweep" + (f" shard {sweep.shard}" if sweep.shard else ""), **totals,
            "timestamp": xml_text(sweep.started_at), "hostname": xml_text(t.hostname or "unknown"),
        })
        props = ET.SubElement(suite, "properties")
        for name, value in (("kvdiag.version", sweep.kvdiag_version), ("build.commit", t.commit),
                            ("build.dirty", t.dirty), ("build.dir", t.build_dir),
                            ("build.cuda_architectures", t.cuda_architectures), ("build.cuda_flags", t.cuda_flags),
                            ("gpu.name", t.gpu_name), ("gpu.cc", t.cc), ("gpu.driver", t.driver),
                            ("cuda.runtime", t.runtime), ("compute_sanitizer", t.sanitizer_version),
                            ("machine.key", t.machine_key), ("shard", sweep.shard),
                            ("interrupted", sweep.interrupted or None)):
            if value is not None:
                text = str(value).lower() if isinstance(value, bool) else value
                ET.SubElement(props, "property", {"name": name, "value": xml_text(text)})
        for v in views:
            case = ET.SubElement(suite, "testcase", {
                "classname": f"kvdiag.{v.id}", "name": xml_text(f"{v.id} {v.title}".strip()),
                "time": f"{v.duration_s:.3f}",
            })
            if v.verdict in FAILURE:
                node = ET.SubElement(case, "failure", {"type": v.verdict, "message": xml_text(v.key_evidence)})
                node.text = xml_text(_detail(v))
            elif v.verdict in ERROR:
                node = ET.SubElement(case, "error", {"type": v.verdict, "message": xml_text(v.reason)})
                node.text = xml_text(_detail(v))
            elif v.verdict in SKIPPED:
                ET.SubElement(case, "skipped", {"message": xml_text(f"{v.verdict}: {v.reason}")})
            out = [f"verdict: {v.verdict} ({v.k_of_n})"] + ([f"range: {v.range}"] if v.range else [])
            if v.run_dir:
                out.append(f"run: {v.run_dir}")
            ET.SubElement(case, "system-out").text = xml_text("\n".join(out))
        ET.indent(root)
        return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
