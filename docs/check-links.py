#!/usr/bin/env python3
"""Check that every relative link in README.md, docs/**/*.md and deploy/**/*.md resolves.

A link `[text](path)` must name a file or directory that exists, relative to the file
it is in; `[text](path#anchor)` and `[text](#anchor)` must also name a heading of that
Markdown file, by the anchor GitHub gives it. Links to other sites are not followed.

    docs/check-links.py        # from anywhere in the repository; exit 1 on a broken link
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """The lines of `text` outside fenced code blocks, with their numbers."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        marker = re.match(r"^\s*(```+|~~~+)", line)
        if marker:
            if fence is None:
                fence = marker.group(1)[0]
            elif marker.group(1)[0] == fence:
                fence = None
            continue
        if fence is None:
            yield number, line


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        found = set()
        for _, line in prose_lines(path.read_text(encoding="utf-8")):
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def without_code_spans(line):
    return re.sub(r"`[^`]*`", "", line)


def main():
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "deploy").rglob("*.md")),
    ]
    broken = 0
    checked = 0
    for md in files:
        text = md.read_text(encoding="utf-8")
        for number, line in prose_lines(text):
            for target in LINK.findall(without_code_spans(line)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                checked += 1
                path_part, _, anchor = target.partition("#")
                dest = (md.parent / path_part).resolve() if path_part else md
                where = f"{md.relative_to(ROOT)}:{number}"
                if not dest.exists():
                    print(f"{where}: {target}: no such file")
                    broken += 1
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    print(f"{where}: {target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
                    broken += 1
    print(f"{checked} relative links in {len(files)} files, {broken} broken", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
