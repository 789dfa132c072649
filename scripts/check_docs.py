#!/usr/bin/env python3
"""Keeps the documentation's commands true to the built programs (python3 standard library only).

Check mode (default): every `endor-pack …`, `endor-infer …` and `endor-serve …` command in the fenced code
blocks of README.md and docs/*.md (or of the FILES given) is parsed; for each one, `PROGRAM [SUBCOMMAND] --help`
must exit 0 and every flag the command names (`--long`, `-s`, also inside `[...]` synopses) must appear in that
help text. A program that is not built in BUILD is reported and its commands are not checked (for programs that
are optional or not landed yet, e.g. endor-serve); at least one command of each built program must be found.

Walk mode (--walk PAGE): the page's ```sh / ```bash blocks are run top to bottom as one bash script
(`set -euo pipefail`) in a fresh temporary folder holding `samples` (the repository's) and `build` (BUILD), so a
page written to run from the repository root runs unchanged, and whatever it writes goes away afterwards. Any
failing command fails the walk, and the page must run at least one endor-pack and one endor-infer command.

Usage: scripts/check_docs.py [--build BUILD] [FILES...]
       scripts/check_docs.py [--build BUILD] --walk docs/run-and-chat.md
BUILD defaults to ./build of the repository.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

PROGRAMS = ("endor-pack", "endor-infer", "endor-serve")
SHELL_INFOS = ("", "sh", "bash", "shell", "console")
WRAPPERS = {"time", "nice", "env", "exec", "sudo", "timeout", "valgrind", "gdb", "--args"}
SEPARATORS = {"|", "||", "&&", ";", "&", "<", ">", ">>", "2>", "2>&1", "<<"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_blocks(path):
    """Yields (info string, first line number, lines) of each fenced code block of a Markdown file."""
    info, start, lines = None, 0, []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            stripped = line.strip()
            if info is None:
                m = re.match(r"^\s*(```+|~~~+)\s*([\w+-]*)", line)
                if m:
                    info, fence, start, lines = m.group(2).lower(), m.group(1), n + 1, []
            elif stripped.startswith(fence[:3]) and stripped.strip(fence[0]) == "":
                yield info, start, lines
                info = None
            else:
                lines.append(line.rstrip("\n"))


def logical_lines(start, lines):
    """Joins continued lines (a trailing backslash, or a README synopsis line that starts with whitespace and
    '[' or '--'); skips here-document bodies. Yields (line number, text)."""
    out, heredoc_end = [], None
    for i, line in enumerate(lines):
        if heredoc_end is not None:
            if line.strip() == heredoc_end:
                heredoc_end = None
            continue
        m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if m:
            heredoc_end = m.group(1)
        if out and (out[-1][1].endswith("\\") or re.match(r"^\s+(\[|--)", line)):
            out[-1] = (out[-1][0], out[-1][1].rstrip("\\") + " " + line.strip())
        else:
            out.append((start + i, line))
    return out


def tokens(text):
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in a synopsis: plain words, comment dropped
        return text.split("#", 1)[0].split()


def commands(path):
    """Yields (line number, program, argument list) for every documented command of PROGRAMS."""
    for info, start, lines in code_blocks(path):
        if info not in SHELL_INFOS:
            continue
        for n, text in logical_lines(start, lines):
            toks = tokens(text)
            for i, t in enumerate(toks):
                # only in command position: first word, after a separator, a wrapper or VAR=value
                prev = toks[i - 1] if i else None
                in_position = prev is None or prev in SEPARATORS or prev in WRAPPERS or re.fullmatch(r"\w+=\S*", prev)
                if os.path.basename(t) in PROGRAMS and in_position:
                    args = []
                    for a in toks[i + 1:]:
                        if a in SEPARATORS or a.startswith((">", "2>", "<")):
                            break
                        args.append(a)
                    yield n, os.path.basename(t), args


def find_programs(build):
    found = {}
    for dirpath, dirnames, filenames in os.walk(build):
        dirnames[:] = [d for d in dirnames if d != "CMakeFiles"]
        for p in PROGRAMS:
            path = os.path.join(dirpath, p)
            if p in filenames and os.access(path, os.X_OK):
                if p not in found or len(path) < len(found[p]):
                    found[p] = path
    return found


class Helps:
    """`PROGRAM [SUB] --help` text, run once per (program, subcommand)."""

    def __init__(self, paths):
        self.paths, self.cache = paths, {}

    def get(self, program, sub=None):
        key = (program, sub)
        if key not in self.cache:
            argv = [self.paths[program]] + ([sub] if sub else []) + ["--help"]
            try:
                r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
                self.cache[key] = (r.returncode, r.stdout + r.stderr)
            except (OSError, subprocess.TimeoutExpired) as e:
                self.cache[key] = (-1, str(e))
        return self.cache[key]

    def subcommand(self, program, args):
        """The subcommand the arguments start with, if the program has one by that name."""
        if not args or not re.fullmatch(r"[a-z][a-z0-9-]*", args[0]):
            return None
        rc, text = self.get(program, args[0])
        return args[0] if rc == 0 and text != self.get(program)[1] else None


def flags(args):
    for a in args:
        a = a.strip("[]()").split("=", 1)[0]
        for part in a.split("|"):  # "[--a|--b]"
            if re.fullmatch(r"--[a-z0-9][a-z0-9-]*", part) or re.fullmatch(r"-[A-Za-z]", part):
                yield part


def in_help(flag, text):
    if flag.startswith("--"):
        return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text) is not None
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?=[,\s])", text) is not None


def check(files, build):
    paths = find_programs(build)
    helps = Helps(paths)
    errors, counted, skipped = [], {p: 0 for p in PROGRAMS}, {p: 0 for p in PROGRAMS}
    for path in files:
        rel = os.path.relpath(path, ROOT)
        for n, program, args in commands(path):
            if program not in paths:
                skipped[program] += 1
                continue
            counted[program] += 1
            sub = helps.subcommand(program, args)
            if sub is None and args and re.fullmatch(r"[a-z][a-z0-9-]*", args[0]):
                # a lower-case word without a dot or slash: a subcommand name, not a file (files are
                # written with their extension, placeholders in capitals)
                errors.append(f"{rel}:{n}: `{program} {args[0]}`: no such subcommand (`{program} {args[0]} --help` fails)")
                continue
            rc, text = helps.get(program, sub)
            name = program + (" " + sub if sub else "")
            if rc != 0:
                errors.append(f"{rel}:{n}: `{name} --help` exited {rc}")
                continue
            for f in flags(args[1:] if sub else args):
                if not in_help(f, text):
                    errors.append(f"{rel}:{n}: `{name}` has no option {f} (not in `{name} --help`)")
    for p in PROGRAMS:
        if p not in paths:
            print(f"check_docs: {p} is not built in {build}: its {skipped[p]} documented command(s) were not checked")
        elif counted[p] == 0 and p != "endor-serve":
            errors.append(f"no documented {p} command found in {len(files)} file(s): is the extraction broken?")
        else:
            print(f"check_docs: {counted[p]} {p} command(s) checked against {paths[p]}")
    for e in errors:
        print("error: " + e, file=sys.stderr)
    return 1 if errors else 0


def walk(page, build):
    blocks = [(start, lines) for info, start, lines in code_blocks(page) if info in ("sh", "bash")]
    script = ["set -euo pipefail", "PS4='+ [line $LINENO] '", "set -x"]
    ran = " ".join(" ".join(lines) for _, lines in blocks)
    for p in ("endor-pack", "endor-infer"):
        if not re.search(r"(^|[\s/])" + p + r"\s", ran):
            print(f"error: {page}: no {p} command in its sh blocks", file=sys.stderr)
            return 1
    origin = {}  # walk.sh line -> page line
    for start, lines in blocks:
        for i, line in enumerate(lines):
            script.append(line)
            origin[len(script)] = start + i
    rel = os.path.relpath(page, ROOT)
    with tempfile.TemporaryDirectory(prefix="endor-docs-walk-") as tmp:
        os.symlink(os.path.join(ROOT, "samples"), os.path.join(tmp, "samples"))
        os.symlink(os.path.abspath(build), os.path.join(tmp, "build"))
        with open(os.path.join(tmp, "walk.sh"), "w") as f:
            f.write("\n".join(script) + "\n")
        env = dict(os.environ)  # BUILD's programs first, whether or not the page sets PATH itself
        env["PATH"] = os.pathsep.join(sorted({os.path.dirname(p) for p in find_programs(os.path.abspath(build)).values()}) +
                                      [env.get("PATH", "")])
        r = subprocess.run(["bash", "walk.sh"], cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace", timeout=1800)
    # progress lines (perplexity windows) would drown the trace
    print("\n".join(l for l in r.stdout.splitlines() if not l.startswith("perplexity: window ")))
    if r.returncode != 0:
        traced = re.findall(r"^\++ \[line (\d+)\]", r.stdout, re.M)
        where = f"{rel}:{origin.get(int(traced[-1]), '?')}" if traced else rel
        print(f"error: {where}: the walk failed there (exit {r.returncode})", file=sys.stderr)
        return 1
    print(f"check_docs: {os.path.relpath(page, ROOT)}: {len(blocks)} sh blocks ran")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder with the programs")
    ap.add_argument("--walk", metavar="PAGE", help="run PAGE's sh blocks top to bottom instead of checking flags")
    ap.add_argument("files", nargs="*", help="Markdown files (default: README.md and docs/*.md)")
    a = ap.parse_args()
    if not os.path.isdir(a.build):
        print(f"error: {a.build}: no such build folder", file=sys.stderr)
        return 2
    if a.walk:
        return walk(os.path.abspath(a.walk), a.build)
    files = a.files or [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    return check([os.path.abspath(f) for f in files], a.build)


if __name__ == "__main__":
    sys.exit(main())
