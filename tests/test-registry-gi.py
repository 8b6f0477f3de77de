#!/usr/bin/env python3
# test-registry-gi.py — the plugin registry through GObject Introspection: the
# lists come back as Python lists of objects, failures carry a GLib.Error,
# look-ups raise, and a feature's hyper-parameter schema is readable. The
# expectations are the test plugins' own descriptions (tests/plugins/).
import math
import os
import sys

import gi
gi.require_version("GLib", "2.0")
gi.require_version("Mixprec", "1.0")
from gi.repository import GLib, Mixprec  # noqa: E402

results = []


def check(name, cond):
    results.append((name, bool(cond)))


build = os.environ.get("G_TEST_BUILDDIR", os.path.dirname(os.path.abspath(__file__)))
registry = Mixprec.Registry.new_for_paths([os.path.join(build, "plugins")], False)

plugins = registry.get_plugins()
check("get_plugins returns a list of plugins",
      isinstance(plugins, list) and all(isinstance(p, Mixprec.Plugin) for p in plugins))
check("the valid test plugins load",
      sorted(p.get_name() for p in plugins) == ["test-comm", "test-good", "test-rank"])

good = registry.find_plugin("test-good")
check("plugin properties", (good.props.version, good.props.license, good.props.loaded) ==
      ("1.2.3", "LGPL-2.1-or-later", True))

failures = {p.get_name(): p for p in registry.get_failures()}
check("ten broken test plugins are reported", len(failures) == 10)
err = failures["test-abi-major"].get_load_error()
check("a failure carries a GLib.Error in the plugin domain",
      err.matches(Mixprec.plugin_error_quark(), Mixprec.PluginError.ABI_MISMATCH) and
      "built for plugin ABI 2.0" in err.message)
check("a failed plugin is not loaded", not failures["test-init-fails"].is_loaded())

feature = registry.find_feature(Mixprec.FeatureKind.OPTIMIZER, "testopt", "cpu")
check("highest rank wins", (feature.get_rank(), feature.props.plugin_name) == (200, "test-rank"))

testopt = [f for f in good.get_features() if f.get_name() == "testopt"][0]
schema = [(testopt.get_hparam_name(i), testopt.get_hparam_type(i), testopt.get_hparam_default(i),
           testopt.get_hparam_minimum(i), testopt.get_hparam_maximum(i))
          for i in range(testopt.get_n_hparams())]
check("hyper-parameter schema", schema == [
    ("lr", Mixprec.HyperParamType.DOUBLE, 1e-3, 0.0, math.inf),
    ("momentum", Mixprec.HyperParamType.DOUBLE, 0.9, 0.0, 1.0),
    ("nesterov", Mixprec.HyperParamType.BOOL, 0.0, 0.0, 1.0),
    ("warmup", Mixprec.HyperParamType.INT, 10.0, 0.0, 1000.0),
])
check("state names", testopt.get_state_names() == ["momentum_buffer"])
check("gradient dtypes", testopt.get_grad_dtypes() ==
      [Mixprec.DType.FLOAT32, Mixprec.DType.FLOAT16, Mixprec.DType.BFLOAT16])

try:
    registry.find_feature(Mixprec.FeatureKind.OPTIMIZER, "nosuch", "cpu")
    check("unknown feature raises", False)
except GLib.Error as e:
    check("unknown feature raises", e.matches(Mixprec.plugin_error_quark(), Mixprec.PluginError.NOT_FOUND)
          and "available: otheropt (cpu), testopt (cpu), testopt (testdev)" in e.message)

testcomm = registry.find_feature(Mixprec.FeatureKind.COMM, "testcomm", "cpu")
check("a communicator's dtypes", (testcomm.get_kind(), testcomm.get_comm_dtypes()) ==
      (Mixprec.FeatureKind.COMM, [Mixprec.DType.FLOAT32]))
check("an optimizer has no comm dtypes", testopt.get_comm_dtypes() == [])

default = Mixprec.Registry.get_default()
builtin = default.find_plugin("builtin")
check("the default registry holds the built-in plugin, without a file",
      builtin.get_filename() is None and builtin.is_loaded() and
      [f.get_name() for f in builtin.get_features()] == ["local"])
check("the default registry lists plugins", isinstance(default.get_plugins(), list))
check("the default registry is one object", default is Mixprec.Registry.get_default())

print("1..%d" % len(results))
for i, (name, ok) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, name))
sys.exit(0 if all(ok for _, ok in results) else 1)
