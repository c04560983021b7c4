"""From an entry and a build to a verdict: planning, executing, judging."""
