#!/usr/bin/env python3
"""Keeps functions and files short enough to hold in one's head (python3 standard library only; issue 36).

Two rules, each reported as one line per offender:
  - function: no function in runtime/, packer/ or format-spec/ (tests aside) has a body longer than
    MAX_FUNCTION lines (120), counted from the line of its opening brace to the line of its closing brace;
  - file: no source file anywhere in the repository (C, C++, CUDA, Python, shell, CMake) is longer than
    MAX_FILE lines (900).
kernels/ is outside the function rule by design: a SIMD or CUDA kernel body may stay long where splitting it
would hide the loop. Anything else that must stay long (a generated table, a kernel file) is named in the
allowlist, scripts/function_length_allowlist.txt, with the reason beside it.

Exit status: 0 when nothing is over its limit (or every offender is allowlisted), 1 otherwise, 2 on a usage
error. `--all` also prints allowlisted offenders (marked as such) and allowlist entries that no longer match.

How functions are found, and where that is only approximate (a brace-matching scan, not a C++ parser):
  - comments, string and character literals (raw strings and digit separators included) are blanked first,
    and preprocessor lines (with their continuations) are skipped, so braces inside them do not count; code
    whose braces differ between `#if` branches is counted as if every branch were compiled;
  - a `{` opens a namespace/class/struct/union/enum/extern block when the text before it (since the previous
    `;`, `{` or `}`) starts such a declaration; those blocks are walked into, so member functions defined in a
    class body are found;
  - any other `{` at that level whose preceding text holds a `)` (a parameter list; qualifiers, a trailing
    return type or a constructor's initializer list may follow it) opens a function body, which is then
    measured to its matching `}`; braces in a constructor's member initializers (`a_{x}`) are recognised by
    the identifier right before them and do not count as its body; lambdas, local classes and nested blocks
    count toward the function that holds them, and a lambda assigned at namespace scope is reported under
    its variable's name;
  - a `{` with no `)` before it at that level (an initializer such as `const int kTable[] = {...};`) is data,
    not a function, and only counts toward its file's length;
  - a function-like macro that opens a brace (e.g. a test macro) is reported under the macro's name.

Usage: scripts/check_function_length.py [--all] [--root ROOT]
ROOT defaults to the repository holding this script; files come from `git ls-files` (tracked and untracked,
ignored ones left out), or from a walk of ROOT when it is not a git work tree.
"""
import argparse
import os
import re
import subprocess
import sys

MAX_FUNCTION = 120
MAX_FILE = 900
FUNCTION_DIRS = ("runtime/", "packer/", "format-spec/")
FUNCTION_EXCLUDED_DIRS = ("tests/", "kernels/")
CPP_EXTENSIONS = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".inc")
SOURCE_EXTENSIONS = CPP_EXTENSIONS + (".py", ".sh", ".cmake")
SOURCE_NAMES = ("CMakeLists.txt",)
SKIPPED_DIRS = ("build/", "third_party/", ".git/")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWLIST = os.path.join("scripts", "function_length_allowlist.txt")

CONTAINER = re.compile(r"^(?:template\s*<.*>\s*)?(?:inline\s+)?(?:namespace|class|struct|union|enum)\b|^extern\s*$",
                       re.S)


def source_files(root):
    """Repository-relative paths of the files to check: git's view when there is one, a walk otherwise."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                             check=True, capture_output=True).stdout.decode()
        paths = [p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        paths = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", "build")]
            for name in filenames:
                paths.append(os.path.relpath(os.path.join(dirpath, name), root))
    keep = []
    for p in sorted(set(p.replace(os.sep, "/") for p in paths)):
        if p.startswith(SKIPPED_DIRS) or not os.path.isfile(os.path.join(root, p)):
            continue
        if p.endswith(SOURCE_EXTENSIONS) or os.path.basename(p) in SOURCE_NAMES:
            keep.append(p)
    return keep


def blank_non_code(text):
    """The text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = list(text)
    n, i = len(text), 0
    line_start = True

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n:  # a directive runs to an unescaped newline
                if text[j] == "\n" and text[j - 1] != "\\":
                    break
                j += 1
            blank(i, j)
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if c in " \t\r":
            i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == '"' and re.search(r"(?:^|[^A-Za-z_0-9])(?:u8|u|U|L)?R$", text[max(0, i - 3):i]):
            m = re.match(r'"([^()\\\s]{0,16})\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            blank(i, j)
            i = j
        elif c == '"' or (c == "'" and not is_digit_separator(text, i)):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def is_digit_separator(text, i):
    """True when the quote at i sits inside a number (1'000'000), not opening a character literal."""
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_.'"):
        j -= 1
    return j < i and text[j].isdigit()


def function_name(head):
    """The declarator's name in the text before a function body: the qualified identifier right before the
    first parameter list (paren groups of attributes, decltype and the like are stepped over)."""
    i = 0
    while True:
        i = head.find("(", i)
        if i < 0:
            return head.split()[-1] if head.split() else "?"
        before = head[:i].rstrip()
        if before.endswith("]"):  # a lambda: report the variable it initializes
            m = re.search(r"([A-Za-z_]\w*)\s*=\s*\[[^\]]*\]$", before)
            return m.group(1) if m else "lambda"
        m = re.search(r"(?:~?[A-Za-z_]\w*(?:<[^()]*>)?\s*::\s*)*(?:operator\s*[^\s\w(]*|~?[A-Za-z_]\w*)$", before)
        word = m.group(0) if m else ""
        if re.fullmatch(r"alignas|__attribute__|__declspec|decltype|noexcept|sizeof|alignof", word):
            i = close_paren(head, i) + 1
            continue
        if word.endswith("operator") and head.startswith("()", i):  # operator(): its list is the next one
            return re.sub(r"\s+", "", word) + "()"
        return re.sub(r"\s+", "", word) or "?"


def close_paren(text, i):
    """Index of the ")" that closes the "(" at i (the last index when it is never closed)."""
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return j
    return len(text) - 1


QUALIFIED_END = re.compile(r"\)\s*(?:(?:const|volatile|noexcept|override|final|mutable|&&|&)\s*)*"
                           r"(?:->[^{;]*)?$")
INIT_LIST_MEMBER = re.compile(r"\)\s*(?:noexcept\s*)?:(?!:).*[\w>]$")


def scan_functions(text):
    """Yields (name, first line, last line) for every function body found at namespace or class level."""
    code = blank_non_code(text)
    n = len(code)
    head_start = 0
    i = 0
    while i < n:
        ch = code[i]
        if ch in ";}":
            head_start = i + 1
        elif ch == "{":
            flat = " ".join(code[head_start:i].split())
            if (CONTAINER.search(flat) and not flat.endswith(")")) or flat == "extern":
                head_start = i + 1  # walk into namespaces and classes
            elif QUALIFIED_END.search(flat):
                close = matching_brace(code, i)
                yield function_name(flat), code.count("\n", 0, i) + 1, code.count("\n", 0, close) + 1
                i = close
                head_start = i + 1
            else:
                # data (an initializer), or a member's brace initializer inside a constructor's initializer
                # list (INIT_LIST_MEMBER): skip its braces, and keep the head going in the second case
                i = matching_brace(code, i)
                if not INIT_LIST_MEMBER.search(flat):
                    head_start = i + 1
        i += 1


def matching_brace(code, i):
    """Index of the "}" that closes the "{" at i (the end of the text when it is never closed)."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def read_allowlist(root):
    """Allowlist entries: "path" (the file rule) or "path:function" (the function rule), '#' starts a reason."""
    entries = set()
    path = os.path.join(root, ALLOWLIST)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                entry = line.split("#", 1)[0].strip()
                if entry:
                    entries.add(entry)
    return entries


def offenders(root):
    """(key, message) for every function and file over its limit, in path order."""
    found = []
    for path in source_files(root):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > MAX_FILE:
            found.append((path, f"file     {lines:5d} lines  {path}"))
        if (path.endswith(CPP_EXTENSIONS) and path.startswith(FUNCTION_DIRS)
                and not any("/" + d in "/" + path for d in FUNCTION_EXCLUDED_DIRS)):
            for name, first, last in scan_functions(text):
                length = last - first + 1
                if length > MAX_FUNCTION:
                    found.append((f"{path}:{name}", f"function {length:5d} lines  {path}:{first}  {name}"))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--all", action="store_true", help="also print allowlisted offenders and stale entries")
    parser.add_argument("--root", default=ROOT, help="repository root (default: the one holding this script)")
    args = parser.parse_args()
    allow = read_allowlist(args.root)
    found = offenders(args.root)
    failing = [msg for key, msg in found if key not in allow]
    for key, msg in found:
        if key not in allow:
            print(msg)
        elif args.all:
            print(msg + "  (allowlisted)")
    if args.all:
        for entry in sorted(allow - {key for key, _ in found}):
            print(f"stale allowlist entry: {entry}")
    functions = sum(1 for m in failing if m.startswith("function"))
    print(f"{functions} function(s) over {MAX_FUNCTION} lines, {len(failing) - functions} file(s) over {MAX_FILE}"
          f" lines ({len(found) - len(failing)} allowlisted)", file=sys.stderr)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
