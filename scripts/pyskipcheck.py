"""Fail CI when a pytest test skipped that is not on the allowlist.

Usage: python3 scripts/pyskipcheck.py JUNIT.xml ALLOWLIST
The allowlist has "TESTNAME  # reason" lines (fnmatch patterns on the test's
"module::name"). Prints every skip with its reason.
"""
import fnmatch
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    junit, allow_path = sys.argv[1], sys.argv[2]
    allow = []
    with open(allow_path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                allow.append(line)
    bad = []
    skipped = 0
    ran = 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        ran += 1
        skip = case.find("skipped")
        if skip is None:
            continue
        skipped += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        reason = skip.get("message", "")
        print(f"pytest skipped: {name}: {reason}")
        if not any(fnmatch.fnmatch(name, pat) for pat in allow):
            bad.append((name, reason))
    if ran == 0:
        print("FAIL: pytest ran no test")
        return 1
    if bad:
        print(f"FAIL: {len(bad)} pytest tests skipped that are not on {allow_path}:")
        for name, reason in bad:
            print(f"  {name}: {reason}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
