"""Parses one scrape in both text formats with the Prometheus project's own Python parsers.

Usage: parse.py PROMETHEUS_TEXT_FILE OPENMETRICS_FILE

The OpenMetrics parser is strict (family name clashes, counter suffixes, histogram buckets,
escaping, the final `# EOF`); either parser raising fails the run. Prints, as JSON, each
format's families with their types, which the calling test compares.
"""

import json
import sys

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text


def families(parsed):
    out = {}
    for family in parsed:
        if family.name in out:
            raise ValueError(f"family {family.name} appears twice")
        out[family.name] = {
            "type": family.type,
            "samples": len(family.samples),
            "help": family.documentation,
        }
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as text, open(
        sys.argv[2], encoding="utf-8"
    ) as openmetrics:
        report = {
            "prometheus": families(parse_text(text.read())),
            "openmetrics": families(parse_openmetrics(openmetrics.read())),
        }
    json.dump(report, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
