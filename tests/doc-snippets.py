#!/usr/bin/env python3
"""doc-snippets.py: runs every fenced code block of README.md and
examples/README.md against the build tree, and prints TAP.

A block runs by its language: sh in a copy of the top of an in-tree build
(a folder of links to the build and source trees, where ./examples/charlm
and examples/charlm.py train --steps 20, and ./examples/gpt2/gpt2 a small
model 10 steps, so that the whole run stays short); c is compiled with `cc FILE $(pkg-config --cflags --libs mixprec)`
against the uninstalled library (mixprec-uninstalled.pc) and run; python
and vala likewise with the build's typelib, overrides and vapi. Blocks in
`text` are pictures, not code. An HTML comment on the line before a block
says more:

  <!-- snippet: file NAME -->          save the block as NAME (then run it)
  <!-- snippet: after NAME ... -->     needs the files of earlier blocks
  <!-- snippet: output of COMMAND -->  every line but "..." is a line of
                                       COMMAND's output (spaces aside)
  <!-- snippet: needs ucx|cuda|nccl|torch --> skipped without that plugin (and
                                       a usable GPU; two for nccl); torch:
                                       run by PYTHON_TORCH, skipped without
  <!-- snippet: installed -->          sh run as if libmixprec were
                                       installed: tools on PATH, pkg-config,
                                       valac and python3 finding the build
  <!-- snippet: c fragment in FILE --> compiled inside FILE (tests/...),
                                       which defines what it uses
  <!-- snippet: ci -->                 the README's test command: must be a
                                       line of .ci/run (make check cannot
                                       run itself)
  <!-- snippet: build, then run with ARGS -->
                                       `SETUP && ... && PROGRAM`: each setup
                                       command is one of the ci command's,
                                       and PROGRAM runs with ARGS added
  <!-- snippet: skip: REASON -->       not run here, for REASON

Also: the option table of examples/README.md lists exactly the long
options of `./examples/charlm --help`.

Environment (tests/local.mk): MIXPREC_TOP_BUILDDIR, G_TEST_SRCDIR,
SNIPPET_CC, SNIPPET_CFLAGS, SNIPPET_LDFLAGS, PYTHON_GI, VALAC.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

top = os.path.realpath(os.environ.get("MIXPREC_TOP_BUILDDIR", "."))
srcdir = os.path.realpath(os.path.join(os.environ.get("G_TEST_SRCDIR", os.path.join(top, "tests")),
                                       ".."))
DOCS = ["README.md", "examples/README.md"]
WORDS = "/usr/share/dict/american-english"
# The examples train 20 steps on every 16th word of the list.
CHARLM_ARGS = ["--steps", "20", "--eval-every", "10"]
# ... and examples/gpt2/gpt2 a 2-layer model 10 steps.
GPT2_ARGS = ["--steps", "10", "--eval-every", "5", "--layers", "2", "--heads", "2", "--embd", "32",
             "--ctx", "32", "--val-windows", "8"]
TIMEOUT = 600

results = []
count = [0]


def record(line):
    count[0] += 1
    results.append(line % count[0])


def ok(name):
    record("ok %d - " + name.replace("%", "%%"))


def not_ok(name, detail):
    record("not ok %d - " + name.replace("%", "%%"))
    for line in detail.rstrip().splitlines()[-60:]:
        results.append("# " + line)


def skip(name, reason):
    record("ok %d - " + (name + " # SKIP " + reason).replace("%", "%%"))


# ------------------------------------------------------------ extraction

DIRECTIVE = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")


def extract(path):
    """The fenced blocks of a Markdown file: (line, language, directive, text)."""
    blocks = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i + 1, m.group(1)
        j = i - 1
        while j >= 0 and lines[j].strip() == "":
            j -= 1
        d = DIRECTIVE.match(lines[j]) if j >= 0 else None
        body = []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        blocks.append((start, lang, d.group(1) if d else None, "\n".join(body) + "\n"))
        i += 1
    return blocks


def parse_directive(text):
    """{'skip': reason} or a dict of the comma-separated items."""
    out = {}
    if text is None:
        return out
    if text.startswith("skip:"):
        return {"skip": text[5:].strip()}
    m = re.match(r"build, then run with (.*)$", text)
    if m:
        return {"build-run": shlex.split(m.group(1))}
    for item in (x.strip() for x in text.split(",")):
        if item.startswith("file "):
            out["file"] = item[5:].strip()
        elif item.startswith("after "):
            out["after"] = item[6:].split()
        elif item.startswith("output of "):
            out["output"] = item[10:]
        elif item.startswith("needs "):
            out.setdefault("needs", []).extend(item[6:].split())
        elif item.startswith("c fragment in "):
            out["fragment"] = item[14:].strip()
        elif item in ("installed", "ci"):
            out[item] = True
        else:
            out.setdefault("unknown", []).append(item)
    return out


# ------------------------------------------------------------ environment

def have_plugin(name):
    return any(os.path.exists(os.path.join(top, "plugins", d, "mixprec-%s.so" % name))
               for d in (".libs", os.path.join(name, ".libs")))


def make_tree(tmp):
    """The top of an in-tree build, whatever the build: links to the build
    tree and the source tree, and short-running example programs."""
    tree = os.path.join(tmp, "tree")
    os.makedirs(os.path.join(tree, "examples"))
    for name in ("tools", "plugins", "libmixprec", "include", "bench"):
        if os.path.exists(os.path.join(top, name)):
            os.symlink(os.path.join(top, name), os.path.join(tree, name))
    # bindings/ holds built files (typelib, vapi) and source ones (the
    # overrides, mixprec.torch): out of tree they lie in two folders, which
    # an in-tree build has in one.
    os.makedirs(os.path.join(tree, "bindings"))
    for base in (top, srcdir):
        folder = os.path.join(base, "bindings")
        for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            link = os.path.join(tree, "bindings", entry)
            if not os.path.lexists(link):
                os.symlink(os.path.join(folder, entry), link)
    for name in ("build-aux", "tests", "man"):
        os.symlink(os.path.join(srcdir, name), os.path.join(tree, name))
    for name in ("mixprec-uninstalled.pc", "mixprec.pc"):
        if os.path.exists(os.path.join(top, name)):
            os.symlink(os.path.join(top, name), os.path.join(tree, name))
    os.symlink(os.path.join(srcdir, "examples", "configs"), os.path.join(tree, "examples", "configs"))
    args = list(CHARLM_ARGS)
    if os.path.exists(WORDS):
        words = os.path.join(tmp, "words")
        with open(WORDS, encoding="utf-8", errors="replace") as src, open(words, "w") as dst:
            dst.writelines(line for i, line in enumerate(src) if i % 16 == 0)
        args += ["--words", words]
    charlm = os.path.join(tree, "examples", "charlm")
    with open(charlm, "w") as f:
        f.write("#!/bin/sh\n# the build's charlm, in a short run\nexec %s \"$@\" %s\n"
                % (shlex.quote(os.path.join(top, "examples", "charlm")),
                   " ".join(shlex.quote(a) for a in args)))
    os.chmod(charlm, 0o755)
    # examples/gpt2/gpt2 as a small model in a short run: options given
    # last win, so the README's shape gives way to this one.
    gpt2 = os.path.join(top, "examples", "gpt2", "gpt2")
    if os.path.exists(gpt2):
        os.makedirs(os.path.join(tree, "examples", "gpt2"))
        with open(os.path.join(tree, "examples", "gpt2", "gpt2"), "w") as f:
            f.write("#!/bin/sh\n# the build's gpt2, small and short\nexec %s \"$@\" %s\n"
                    % (shlex.quote(gpt2), " ".join(GPT2_ARGS)))
        os.chmod(os.path.join(tree, "examples", "gpt2", "gpt2"), 0o755)
    for script, extra in (("charlm.py", args),
                          ("torch-charlm.py", ["--steps", "10", "--eval-every", "5",
                                               "--eval-words", "256"] + args[4:])):
        with open(os.path.join(tree, "examples", script), "w") as f:
            f.write("# the source tree's %s, in a short run\nimport runpy, sys\n"
                    "sys.argv += %r\nrunpy.run_path(%r, run_name='__main__')\n"
                    % (script, extra, os.path.join(srcdir, "examples", script)))
    # valac finds vapi files in $XDG_DATA_DIRS/vala/vapi, as installed ones
    vapi = os.path.join(tmp, "share", "vala", "vapi")
    os.makedirs(vapi)
    for name in ("mixprec.vapi", "mixprec.deps"):
        if os.path.exists(os.path.join(top, "bindings", name)):
            os.symlink(os.path.join(top, "bindings", name), os.path.join(vapi, name))
    return tree


def make_bin(tmp):
    """Commands standing in for the ones a reader has: cc is the build's
    compiler and flags (warnings as errors), python3 the Python with gi,
    valac quiet."""
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    cc = os.environ.get("SNIPPET_CC") or "cc"
    tools = {"cc": 'exec %s %s -Wall -Werror "$@" %s' % (cc, os.environ.get("SNIPPET_CFLAGS", ""),
                                                        os.environ.get("SNIPPET_LDFLAGS", ""))}
    py = os.environ.get("PYTHON_GI")
    if py and py != "no":
        tools["python3"] = 'exec %s "$@"' % shlex.quote(py)
    valac = os.environ.get("VALAC")
    if valac and valac != "no":
        tools["valac"] = 'exec %s --quiet -X -w "$@"' % shlex.quote(valac)
    for name, body in tools.items():
        path = os.path.join(bindir, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + body + "\n")
        os.chmod(path, 0o755)
    return bindir


def base_env(tmp, installed=False):
    env = dict(os.environ)
    env["PATH"] = os.path.join(tmp, "bin") + os.pathsep + env.get("PATH", "")
    for v in ("MIXPREC_PLUGIN_PATH", "MIXPREC_PLUGIN_SYSTEM_PATH", "GI_TYPELIB_PATH",
              "PKG_CONFIG_PATH", "PYTHONPATH"):
        env.pop(v, None)
    env["LD_LIBRARY_PATH"] = os.path.join(top, "libmixprec", ".libs")
    env["PKG_CONFIG_PATH"] = top              # mixprec-uninstalled.pc
    if installed:
        env["PATH"] = os.path.join(top, "tools") + os.pathsep + env.get("PATH", "")
        env["GI_TYPELIB_PATH"] = os.path.join(top, "bindings")
        env["PYTHONPATH"] = os.path.join(srcdir, "bindings") + os.pathsep + \
            os.path.join(srcdir, "bindings", "python")      # mixprec.torch
        env["XDG_DATA_DIRS"] = os.path.join(tmp, "share") + os.pathsep + \
            env.get("XDG_DATA_DIRS", "/usr/local/share:/usr/share")
    return env


def run(cmd, cwd, env, shell=False):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, shell=shell, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=TIMEOUT,
                           executable="/bin/sh" if shell else None)
        return p.returncode, p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        return -1, (e.stdout or b"").decode("utf-8", "replace") + "\n(timed out)"


def run_sh(text, tree, env):
    return run("set -e\n" + text, tree, env, shell=True)


# ------------------------------------------------------------ checks per language

def missing_tools(text, lang):
    """Why a block cannot run here, or None."""
    py = os.environ.get("PYTHON_GI", "no")
    if lang == "python" or re.search(r"\bpython3\b", text):
        if py in ("", "no"):
            return "no Python with gi (PYTHON_GI)"
        if not os.path.exists(os.path.join(top, "bindings", "Mixprec-1.0.typelib")):
            return "no typelib built (introspection disabled)"
    if lang == "vala" or re.search(r"\bvalac\b", text):
        if os.environ.get("VALAC", "no") in ("", "no") or \
           not os.path.exists(os.path.join(top, "bindings", "mixprec.vapi")):
            return "no valac or no mixprec.vapi built"
    return None


def python_missing_module(out):
    m = re.search(r"No module named '(numpy|matplotlib)", out)
    return m.group(1) if m else None


def check_block(doc, line, lang, directive, text, tree, tmp, state):
    name = "%s:%d (%s)" % (doc, line, lang or "no language")
    d = parse_directive(directive)
    if "unknown" in d:
        return not_ok(name, "unknown snippet directive: %s" % ", ".join(d["unknown"]))
    if "skip" in d:
        return skip(name, d["skip"])
    if lang == "text" and not d:
        return None                            # a picture, not code
    for f in d.get("after", []):
        if f not in state["files"]:
            return not_ok(name, "needs %s from an earlier snippet, which none saved" % f)
    for need in d.get("needs", []):
        if need == "torch" and os.environ.get("PYTHON_TORCH", "no") in ("", "no"):
            return skip(name, "no Python with torch (PYTHON_TORCH)")
        if need == "ucx" and not have_plugin("comm-ucx"):
            return skip(name, "the UCX communicator was not built")
        if need == "nccl":
            if not have_plugin("comm-nccl"):
                return skip(name, "the NCCL communicator was not built")
            rc, out = run(["nvidia-smi", "-L"], tree, base_env(tmp)) \
                if shutil.which("nvidia-smi") else (1, "")
            if len(re.findall(r"^GPU \d+", out, re.M)) < 2:
                return skip(name, "fewer than 2 GPUs for 2 ranks over NCCL")
            need = "cuda"
        if need == "cuda":
            if not have_plugin("device-cuda"):
                return skip(name, "the CUDA plugins were not built")
            rc, out = run([os.path.join(tree, "tools", "mixprec-inspect"), "cuda"], tree,
                          base_env(tmp))
            if rc != 0 or re.search(r"^\s*Usable here\s+no\b", out, re.M):
                return skip(name, "no usable GPU")
    if ("examples/charlm" in text + d.get("output", "") or "examples/gpt2" in text) and \
            not os.path.exists(WORDS):
        return skip(name, "no word list %s (Debian package wamerican)" % WORDS)
    if "examples/gpt2/gpt2" in text and not os.path.exists(os.path.join(top, "examples", "gpt2", "gpt2")):
        return skip(name, "examples/gpt2 was not built (no OpenBLAS)")
    if "file" in d:
        with open(os.path.join(tree, d["file"]), "w") as f:
            f.write(text)
        state["files"].add(d["file"])

    if "ci" in d:
        with open(os.path.join(srcdir, ".ci", "run")) as f:
            ci = [x.strip() for x in f.read().splitlines()]
        if text.strip() in ci:
            state["ci"] = text.strip()
            return ok(name + ": the README's test command is what .ci/run runs")
        return not_ok(name, "not a line of .ci/run:\n" + text)

    if "build-run" in d:
        parts = [p.strip() for p in text.strip().split("&&")]
        with open(os.path.join(srcdir, ".ci", "run")) as f:
            ci = set(p.split()[0] for x in f.read().splitlines() for p in x.split("&&")
                     if p.split())
        setup = [p for p in parts[:-1] if p.split()[0] not in ci]
        if setup:
            return not_ok(name, "setup commands that .ci/run does not run: %s" % setup)
        rc, out = run_sh(parts[-1] + " " + " ".join(shlex.quote(a) for a in d["build-run"]),
                         tree, base_env(tmp))
        return ok(name + ": " + parts[-1]) if rc == 0 else not_ok(name, out)

    if "output" in d:
        rc, out = run_sh(d["output"], tree, base_env(tmp))
        if rc != 0:
            return not_ok(name, out)
        got = set(" ".join(x.split()) for x in out.splitlines())
        missing = [x for x in text.splitlines()
                   if x.strip() not in ("", "...") and " ".join(x.split()) not in got]
        if missing:
            return not_ok(name, "lines not in the output of %s:\n%s\noutput:\n%s"
                          % (d["output"], "\n".join(missing), out))
        return ok(name + ": the output of " + d["output"])

    why = missing_tools(text, lang)
    if why:
        return skip(name, why)

    if lang in ("sh", "console", "bash"):
        env = base_env(tmp, installed=d.get("installed", False))
        if "torch" in d.get("needs", []):      # python3 is the Python with torch
            bindir = os.path.join(tmp, "bin-torch")
            os.makedirs(bindir, exist_ok=True)
            with open(os.path.join(bindir, "python3"), "w") as f:
                f.write('#!/bin/sh\nexec %s "$@"\n' % shlex.quote(os.environ["PYTHON_TORCH"]))
            os.chmod(os.path.join(bindir, "python3"), 0o755)
            env["PATH"] = bindir + os.pathsep + env["PATH"]
        rc, out = run_sh(text, tree, env)
        module = python_missing_module(out) if rc != 0 else None
        if module:
            return skip(name, "Python module %s is missing" % module)
        return ok(name) if rc == 0 else not_ok(name, out)

    if lang == "c":
        src = os.path.join(tmp, "snippet-%d.c" % line)
        with open(src, "w") as f:
            f.write(text)
        if "fragment" in d:
            compile_cmd = 'cc -DSNIPPET_FILE=\'"%s"\' %s -o %s $(pkg-config --cflags --libs mixprec)' % (
                src, shlex.quote(os.path.join(srcdir, d["fragment"])), "snippet-%d" % line)
        else:
            compile_cmd = "cc %s -o snippet-%d $(pkg-config --cflags --libs mixprec)" % (src, line)
        rc, out = run_sh(compile_cmd + " && ./snippet-%d" % line, tree, base_env(tmp))
        return ok(name + ": compiles and runs") if rc == 0 else not_ok(name, out)

    if lang == "python":
        src = os.path.join(tmp, "snippet-%d.py" % line)
        with open(src, "w") as f:
            f.write(text)
        py = os.environ["PYTHON_TORCH"] if "torch" in d.get("needs", []) else os.environ["PYTHON_GI"]
        rc, out = run([py, src], tree, base_env(tmp, installed=True))
        module = python_missing_module(out) if rc != 0 else None
        if module:
            return skip(name, "Python module %s is missing" % module)
        return ok(name + ": runs") if rc == 0 else not_ok(name, out)

    if lang == "vala":
        src = os.path.join(tmp, "snippet-%d.vala" % line)
        with open(src, "w") as f:
            f.write(text)
        rc, out = run_sh("valac --vapidir bindings --pkg mixprec -o snippet-%d %s && ./snippet-%d"
                         % (line, src, line), tree, base_env(tmp))
        return ok(name + ": compiles and runs") if rc == 0 else not_ok(name, out)

    return not_ok(name, "no rule runs a block in language '%s' without a directive" % lang)


def check_option_table(tree, tmp):
    name = "examples/README.md: the option table lists exactly charlm's options"
    rc, out = run([os.path.join(top, "examples", "charlm"), "--help"], tree, base_env(tmp))
    if rc != 0:
        return not_ok(name, out)
    have = set(o for o in re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", out, re.M)
               if not o.startswith("--help"))
    with open(os.path.join(srcdir, "examples", "README.md")) as f:
        listed = set(re.findall(r"^\| `(--[a-z][a-z0-9-]*)", f.read(), re.M))
    if have == listed:
        return ok(name + " (%d)" % len(have))
    return not_ok(name, "in --help only: %s\nin the table only: %s"
                  % (sorted(have - listed), sorted(listed - have)))


def main():
    tmp = tempfile.mkdtemp(prefix="mixprec-snippets-")
    try:
        tree = make_tree(tmp)
        make_bin(tmp)
        state = {"files": set()}
        for doc in DOCS:
            for line, lang, directive, text in extract(os.path.join(srcdir, doc)):
                check_block(doc, line, lang, directive, text, tree, tmp, state)
        check_option_table(tree, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("1..%d" % count[0])
    print("\n".join(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
