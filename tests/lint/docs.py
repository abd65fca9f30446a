#!/usr/bin/env python3
"""Lint of the repository's documentation (run by tests/run.sh).

Checks, from the repository's top directory:
  1. every relative link in a Markdown file names a file that exists, and a
     '#anchor' into a Markdown file names one of its headings;
  2. every field-case id (F01, F17a, ...) that a test names has its own section
     in doc/field-cases.md, and every test a section lists exists;
  3. nothing in the repository points outside it (the design notes it was
     built from are not shipped).

Prints one line per problem (FILE:LINE: reason) and exits 1 if any.
"""

import os
import re
import subprocess
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FIELD_ID = re.compile(r"\bF[0-9]{2}[a-z]?\b")
OUTSIDE = re.compile(r"\.\./shared\b|\bDESIGN\.md\b|\bSTYLE\.md\b|measured-facts\.md|"
                     r"FIELD-CASES\.md|pyxis-trial\.md")


def tracked_files():
    out = subprocess.run(["git", "ls-files", "-z"], check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p]


def anchors(path):
    """GitHub-style anchors of a Markdown file's headings."""
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"#+\s+(.*)", line)
            if m:
                text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
                names.add(text.replace(" ", "-"))
    return names


def check_links(files, problems):
    for path in files:
        if not path.endswith(".md"):
            continue
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for target in LINK.findall(line):
                    if re.match(r"[a-z]+:", target):
                        continue  # an absolute URL or mailto: not ours to check
                    file_part, _, anchor = target.partition("#")
                    dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                        if file_part else path
                    if not os.path.exists(dest):
                        problems.append(f"{path}:{n}: link to {target}: no such file")
                    elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                        problems.append(f"{path}:{n}: link to {target}: no such heading")


def check_field_cases(files, problems):
    doc = "doc/field-cases.md"
    sections = {}
    current = None
    with open(doc, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"#+\s+(F[0-9]{2}[a-z]?)\s*$", line)
            if m:
                current = m.group(1)
                sections[current] = n
            elif current and line.startswith("- **Tests:**"):
                for target in LINK.findall(line):
                    dest = os.path.normpath(os.path.join("doc", target.partition("#")[0]))
                    if not os.path.exists(dest):
                        problems.append(f"{doc}:{n}: {current} lists {target}: no such test")
    for path in files:
        if not path.startswith("tests/") or path.endswith((".md", ".py")):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                for fid in FIELD_ID.findall(line):
                    if fid not in sections and fid[:3] not in sections:
                        problems.append(f"{path}:{n}: field case {fid} has no section in {doc}")


def check_outside(files, problems):
    for path in files:
        if path == "tests/lint/docs.py" or not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
        except UnicodeDecodeError:
            continue  # a binary file (an image)
        for n, line in enumerate(lines, 1):
            if OUTSIDE.search(line):
                problems.append(f"{path}:{n}: points outside the repository: {line.strip()[:80]}")


def main():
    files = [p for p in tracked_files() if os.path.isfile(p)]
    problems = []
    check_links(files, problems)
    check_field_cases(files, problems)
    check_outside(files, problems)
    for p in problems:
        print(p)
    print(f"docs lint: {len(files)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
