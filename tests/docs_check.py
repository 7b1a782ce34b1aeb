#!/usr/bin/env python3
"""docs_check.py MCC — README.md and docs/*.md against the code, so they cannot drift:
(1) docs/spec-fields.md and docs/megatron-flags.md are what `mcc help ... --markdown` prints now
    (remake them with scripts/update_docs.sh);
(2) every `mcc` and `train_rank` command line in a ```sh block names only flags its command
    takes, and every `mcc` line of a block not marked `<!-- no-check: reason -->` runs (in a
    scratch directory, output discarded; `mcc compile` runs as `mcc ir`, which plans the same
    through every pass without compiling kernels);
(3) every Markdown link and every repository path written in the text names a file that exists;
(4) every train_rank flag (runtime/train_flags.def) and every `mcc compile` option is named in
    the docs."""
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

MCC = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
GENERATED = {"docs/spec-fields.md": ["help", "fields", "--markdown"],
             "docs/megatron-flags.md": ["help", "megatron-flags", "--markdown"]}
TOP_DIRS = "bench|tests|docs|frontend|passes|ir|runtime|codegen|common|checkpoint|kernels_templates|scripts|models"
problems = []


def bad(where, msg):
    problems.append(f"{where}: {msg}")


def mcc(args, **kw):
    return subprocess.run([MCC] + args, capture_output=True, text=True, timeout=60, **kw)


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


# (1) the generated pages
for page, args in GENERATED.items():
    if mcc(args).stdout != read(page):
        bad(page, f"not what `mcc {' '.join(args)}` prints: run scripts/update_docs.sh {MCC}")

# what each command takes: its --help (spec commands also the spec fields, Megatron's and train_rank's flags)
train_flags = re.findall(r'RT_FLAG\("(--[a-z0-9-]+)"', read("runtime/train_flags.def"))
train_text = " ".join(train_flags) + " --nproc-per-node --print-plan --version --help"
compile_help = mcc(["compile", "--help"]).stdout
helps = {}


def accepted(sub):
    if sub not in helps:
        own = mcc([sub, "--help"]).stdout
        helps[sub] = own + (compile_help + train_text if sub in ("compile", "ir", "schedule", "tune", "convert") else "")
    return helps[sub]


def flag_known(flag, text):
    return re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", text) is not None


# (2) the command lines of ```sh blocks
def sh_blocks(page):
    lines, block, start, nocheck = read(page).split("\n"), None, 0, None
    for i, line in enumerate(lines):
        if block is None and line.startswith("```sh"):
            prev = lines[i - 1] if i else ""
            m = re.match(r"<!-- no-check(:?)\s*(.*?)\s*-->", prev)
            if m and not m.group(2):
                bad(f"{page}:{i}", "a no-check mark without its reason")
            block, start, nocheck = [], i + 2, bool(m)
        elif block is not None and line.startswith("```"):
            yield start, block, nocheck
            block = None
        elif block is not None:
            block.append(line)


def commands(block, start):
    text, first = "", start
    for n, line in enumerate(block):
        if not text:
            first = start + n
        if line.endswith("\\"):
            text += line[:-1] + " "
            continue
        words = shlex.split(text + line, comments=True)
        text = ""
        if words:
            yield first, words


def check_flags(where, words):
    """The flags of an mcc or train_rank line, each against what its command takes."""
    prog = os.path.basename(words[0])
    if prog == "mcc":
        if len(words) < 2 or words[1].startswith("-"):
            return
        if not mcc([words[1], "--help"]).returncode == 0:
            return bad(where, f"`mcc {words[1]}`: no such command")
        text, args = accepted(words[1]), words[2:]
    else:
        at = [i for i, w in enumerate(words) if os.path.basename(w) == "train_rank"]
        if not at:
            return
        text, args = train_text, words[at[0] + 1:]
    for w in args:
        flag = w.split("=", 1)[0]
        if flag.startswith("--") and not flag_known(flag.replace("_", "-") if prog != "mcc" else flag, text):
            bad(where, f"{' '.join(words[:2])}: {flag} is not a flag it takes")


def run(where, words, scratch):
    """An mcc line, run in scratch (the repository's top-level entries linked there)."""
    args, out = [], None
    it = iter(words[1:])
    for w in it:
        if w == ">":
            out = next(it)
        else:
            args.append(w)
    if args and args[0] == "compile":
        args[0] = "ir"
    stdout = open(os.path.join(scratch, out), "w") if out and out != "/dev/null" else subprocess.DEVNULL
    r = subprocess.run([MCC] + args, cwd=scratch, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60)
    if r.returncode != 0:
        bad(where, f"`{' '.join(words)}` exits {r.returncode}: " + " | ".join(r.stderr.strip().split("\n")[-3:]))


with tempfile.TemporaryDirectory() as scratch:
    for entry in os.listdir(ROOT):
        if not entry.startswith(".") and not entry.startswith("build"):
            os.symlink(os.path.join(ROOT, entry), os.path.join(scratch, entry))
    ran = 0
    for page in PAGES:
        for start, block, nocheck in sh_blocks(page):
            for line, words in commands(block, start):
                where = f"{page}:{line}"
                check_flags(where, words)
                if nocheck:
                    continue
                if os.path.basename(words[0]) != "mcc":
                    bad(where, f"`{words[0]}` cannot run here: mark the block `<!-- no-check: reason -->`")
                    continue
                run(where, words, scratch)
                ran += 1

# (3) links and paths
def anchors(page):
    out = set()
    for h in re.findall(r"^#+ (.*)$", read(page), re.M):
        out.add(re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-"))
    return out


for page in PAGES:
    text, here = read(page), os.path.dirname(page)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(here, path)) if path else page
        if not os.path.exists(os.path.join(ROOT, dest)):
            bad(page, f"link ({target}): {dest} does not exist")
        elif frag and dest.endswith(".md") and frag not in anchors(dest):
            bad(page, f"link ({target}): {dest} has no heading #{frag}")
    for path in set(re.findall(r"(?<![\w./$-])((?:" + TOP_DIRS + r")/[\w./<>*{},-]*)", text)):
        path = path.rstrip(".,-")
        if re.search(r"[<>*{},]", path):  # a pattern (`passes/step_cost_<target>.def`, `tests/passes/*.ir`)
            continue
        if not os.path.exists(os.path.join(ROOT, path)):
            bad(page, f"names {path}, which is not in the tree")

# (4) every train_rank flag and mcc compile option named somewhere
everything = "\n".join(read(p) for p in PAGES)
options = re.findall(r"^  (-[-\w]+)", compile_help.split("Options:")[1].split("Spec fields")[0], re.M)
for flag in train_flags + options:
    if not flag_known(flag, everything):
        bad("docs", f"{flag} is documented nowhere in README.md or docs/*.md")

for p in problems:
    print(p)
print(f"docs_check: {len(PAGES)} pages, {ran} commands run, {len(train_flags) + len(options)} flags looked for, "
      f"{len(problems)} problems")
sys.exit(1 if problems else 0)
