#!/usr/bin/env python3
# test-gpt2-torch.py — examples/gpt2's forward and backward against Hugging
# Face's GPT2LMHeadModel: the C trainer writes its initial weights (one
# FP32 safetensors file, Hugging Face's names) and, for its first
# micro-batch, the tokens, targets, logits and every tensor's gradient;
# transformers loads the same weights (Conv1D keeps the transpose of our
# [out, in] Linear weights; lm_head is tied to wte), runs the same batch
# in float64, and the two must agree within what float32 arithmetic
# allows. Prints TAP; skips without a Python that has torch and
# transformers (PYTHON_TORCH, see tests/python_optional.py).
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_optional  # noqa: E402

python_optional.require("torch", "PYTHON_TORCH")
python_optional.require("transformers", "PYTHON_TORCH")
python_optional.require("safetensors", "PYTHON_TORCH")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

TOP = os.environ.get("MIXPREC_TOP_BUILDDIR", ".")
SRC = os.path.join(os.environ.get("G_TEST_SRCDIR", os.path.join(TOP, "tests")), "..")
GPT2 = os.path.join(TOP, "examples", "gpt2", "gpt2")
TEXT = "/usr/share/dict/american-english"

if not os.path.exists(TEXT):
    print("1..0 # SKIP %s is missing (Debian package wamerican)" % TEXT)
    sys.exit(0)

SHAPE = dict(n_layer=2, n_head=4, n_embd=64, n_ctx=32)
BATCH = 4
# What float32 arithmetic leaves between the C model and a float64
# reference: relative to the largest magnitude of each tensor (a few
# hundred float32 ulps of accumulated rounding through two layers; the
# largest seen is 5e-7 for the gradients, 3e-7 for the logits).
LOGITS_TOL = 1e-5
GRAD_TOL = 1e-5

n = 0
failed = False


def ok(cond, what):
    global n, failed
    n += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n, what))
    failed |= not cond


def read(path, dtype, shape):
    return np.fromfile(path, dtype=dtype).reshape(shape)


def conv1d(name):
    return any(name.endswith(s) for s in (".attn.c_attn.weight", ".attn.c_proj.weight",
                                           ".mlp.c_fc.weight", ".mlp.c_proj.weight"))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init.safetensors")
        dump = os.path.join(tmp, "dump")
        cmd = [GPT2, "--config", os.path.join(SRC, "examples", "configs", "gpt2-fp32.json"),
               "--layers", str(SHAPE["n_layer"]), "--heads", str(SHAPE["n_head"]),
               "--embd", str(SHAPE["n_embd"]), "--ctx", str(SHAPE["n_ctx"]),
               "--batch", str(BATCH), "--seed", "7", "--export-init", init, "--dump", dump]
        run = subprocess.run(cmd, capture_output=True, text=True)
        print("1..%d" % (4 + 2 * (2 + 12 * SHAPE["n_layer"] + 2)))
        ok(run.returncode == 0, "gpt2 --export-init --dump exits 0" +
           ("" if run.returncode == 0 else ": " + run.stderr.strip()[-300:]))
        if run.returncode != 0:
            return

        T = SHAPE["n_ctx"]
        tokens = read(os.path.join(dump, "tokens.bin"), np.uint8, (BATCH, T))
        targets = read(os.path.join(dump, "targets.bin"), np.uint8, (BATCH, T))
        logits_c = read(os.path.join(dump, "logits.bin"), np.float32, (BATCH, T, 256))
        meta = dict(line.split() for line in open(os.path.join(dump, "meta.txt")))

        config = transformers.GPT2Config(
            vocab_size=256, n_positions=T, n_embd=SHAPE["n_embd"], n_layer=SHAPE["n_layer"],
            n_head=SHAPE["n_head"], activation_function="gelu_new", resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config).double()
        model.eval()
        ours = load_file(init)
        state = {}
        for name, tensor in ours.items():
            state[name] = (tensor.t() if conv1d(name) else tensor).double()
        state["lm_head.weight"] = state["transformer.wte.weight"]
        missing, unexpected = model.load_state_dict(state, strict=False)
        # Only buffers (the causal mask of older transformers) may be missing.
        missing = [m for m in missing if not m.endswith(".attn.bias") and
                   not m.endswith(".attn.masked_bias")]
        ok(not missing and not unexpected,
           "the exported names are GPT2LMHeadModel's (missing %s, unexpected %s)"
           % (missing, unexpected))

        ids = torch.from_numpy(tokens.astype(np.int64))
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, 256), torch.from_numpy(targets.astype(np.int64)).reshape(-1))
        loss.backward()

        ref = logits.detach().numpy()
        err = np.abs(logits_c - ref).max() / np.abs(ref).max()
        ok(err <= LOGITS_TOL, "logits: largest difference %.2e of the largest logit (<= %g)"
           % (err, LOGITS_TOL))
        loss_c = float(meta["loss"])
        ok(abs(loss_c - loss.item()) <= 1e-6 * loss.item(),
           "loss %.9f, transformers (float64) %.9f" % (loss_c, loss.item()))

        params = dict(model.named_parameters())
        for name, tensor in ours.items():
            grad_c = np.fromfile(os.path.join(dump, name + ".grad.bin"), dtype=np.float32)
            grad_c = grad_c.reshape(tuple(tensor.shape))
            g = params[name].grad
            g = (g.t() if conv1d(name) else g).numpy()
            ok(grad_c.shape == g.shape, "%s: shape %s" % (name, grad_c.shape))
            scale = max(np.abs(g).max(), 1e-30)
            err = np.abs(grad_c - g).max() / scale
            ok(err <= GRAD_TOL, "%s: gradient within %.2e of the largest (<= %g)"
               % (name, err, GRAD_TOL))


main()
sys.exit(1 if failed else 0)
