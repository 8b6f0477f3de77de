#!/usr/bin/env python3
# test-config-gi.py — MixprecConfig and MixprecConfigLoader through GObject
# Introspection: a Python str is a document, overrides by path resolve the
# Hugging Face "auto" placeholders, and errors arrive as GLib.Error naming
# the path. Expected values are the Trainer's published formulas and
# defaults (TrainingArguments), not this library's output.
import json
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


def raises(fn):
    try:
        fn()
    except GLib.Error as e:
        return e
    return None


# A str is a document (new_from_data is mixprec_config_new_from_string).
c = Mixprec.Config.new_from_data('{"fp16": {"enabled": true}, "zero_optimization": {"stage": 2}}')
check("new_from_data takes a str",
      c.get_precision_mode() == Mixprec.PrecisionMode.FP16 and c.get_zero_stage() == 2)
text, length = c.to_data()
check("to_data reads back from a str",
      Mixprec.Config.new_from_data(text).to_data()[0] == text
      and json.loads(text)["zero_optimization"]["stage"] == 2)

# Errors name the path.
e = raises(lambda: Mixprec.Config.new_from_data('{"fp16": {"loss_scale_window": -3}}'))
check("invalid value raises GLib.Error with the path",
      e is not None and e.matches(Mixprec.config_error_quark(), Mixprec.ConfigError.INVALID_VALUE)
      and e.message.startswith("fp16.loss_scale_window: "))

# Warnings: an unknown top-level key DeepSpeed would ignore.
c = Mixprec.Config.new_from_data('{"cuda_visible_devices": "0,1"}')
check("unknown top-level key is a warning",
      list(c.get_warnings()) == ["cuda_visible_devices: unknown key in the top level, neither a "
                                 "DeepSpeed nor a libmixprec setting; ignored (libmixprec's own "
                                 "settings go in the \"mixprec\" section)"])

# "auto" with overrides: the Trainer's ZeRO formulas from model.hidden_size.
doc = json.dumps({
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_max_lr": "auto", "total_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                          "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto"},
    "train_micro_batch_size_per_gpu": "auto",
})
e = raises(lambda: Mixprec.Config.new_from_data(doc))
check("unresolvable auto names the override",
      e is not None and "--set scheduler.params.total_num_steps=VALUE" in e.message)

hidden = 2048
loader = Mixprec.ConfigLoader.new()
loader.set_override("model.hidden_size", str(hidden))
loader.set_override("scheduler.params.total_num_steps", "5000")
loader.parse_override("optimizer.params.lr=1e-4")
loader.parse_override("bf16.enabled=true")
check("list_overrides", list(loader.list_overrides()) == [
    "model.hidden_size=2048", "scheduler.params.total_num_steps=5000",
    "optimizer.params.lr=0.0001", "bf16.enabled=true"])
c = loader.load_data(doc)
check("reduce_bucket_size = hidden^2", c.get_reduce_bucket_size() == hidden * hidden)
check("prefetch = int(0.9 * hidden^2)", c.get_prefetch_bucket_size() == int(0.9 * hidden * hidden))
check("persistence = 10 * hidden", c.get_param_persistence_threshold() == 10 * hidden)
check("override replaces auto", c.get_optimizer_params().get_double_member("lr") == 1e-4)
betas = c.get_optimizer_params().get_array_member("betas")
check("betas auto -> Trainer defaults",
      [betas.get_double_element(0), betas.get_double_element(1)] == [0.9, 0.999])
check("warmup_max_lr follows the lr",
      c.get_scheduler_params().get_double_member("warmup_max_lr") == 1e-4)
check("micro batch auto -> Trainer default 8", c.get_train_micro_batch_size_per_gpu() == 8)
check("bf16 from override", c.get_precision_mode() == Mixprec.PrecisionMode.BF16)
warnings = list(c.get_warnings())
check("each resolution is a warning line",
      'zero_optimization.reduce_bucket_size: "auto" -> 4194304 (model.hidden_size^2, '
      'model.hidden_size = 2048)' in warnings
      and sum('"auto" -> ' in w for w in warnings) == 6)

# Bad overrides.
e = raises(lambda: loader.set_override("fp16..enabled", "true"))
check("empty key in a path raises",
      e is not None and e.matches(Mixprec.config_error_quark(), Mixprec.ConfigError.UNKNOWN_KEY))
e = raises(lambda: loader.parse_override("no-equals-sign"))
check("assignment without = raises", e is not None and "not an override" in e.message)
bad = Mixprec.ConfigLoader.new()
bad.parse_override("zero_optimization.bucket=1")
e = raises(lambda: bad.load_data("{}"))
check("override naming no setting fails the load",
      e is not None and e.matches(Mixprec.config_error_quark(), Mixprec.ConfigError.UNKNOWN_KEY)
      and e.message.startswith("zero_optimization.bucket: "))

# Strict.
e = raises(lambda: Mixprec.Config.new_from_data('{"cuda_visible_devices": 0, "mixprec": {"strict": true}}'))
check("strict refuses warnings",
      e is not None and e.matches(Mixprec.config_error_quark(), Mixprec.ConfigError.UNKNOWN_KEY))

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
