#!/usr/bin/env python3
# test-fp8-recipe-gi.py — FP8 recipes and scalings through GObject
# Introspection: constructors and keyword construction, errors as
# GLib.Error, the amax history as a list and as bytes, states as
# GLib.Variant, and the recipe of a configuration's fp8 section. Prints
# TAP.

import math
import struct
import sys
import traceback

import gi

gi.require_version('Mixprec', '1.0')
from gi.repository import GLib, Mixprec  # noqa: E402

GLib.log_set_always_fatal(GLib.LogLevelFlags.LEVEL_CRITICAL | GLib.LogLevelFlags.LEVEL_WARNING)


def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]


def test_delayed_sequence():
    r = Mixprec.Fp8Recipe.new_delayed(Mixprec.Fp8Format.HYBRID, 2, Mixprec.Fp8AmaxAlgo.MAX, 1)
    s = r.new_scaling(Mixprec.Fp8Role.BACKWARD)
    assert s.get_dtype() == Mixprec.DType.FLOAT8_E5M2
    assert s.get_recipe() == r and s.get_role() == Mixprec.Fp8Role.BACKWARD
    # 57344 / amax / 2 over a window of two steps, by hand
    expected = [1.0, 57344 / 4 / 2, 57344 / 4 / 2, 57344 / 3 / 2, 57344 / 3 / 2]
    for amax, want in zip([0.0, 4.0, 1.0, 3.0, float('nan')], expected):
        s.record_amax(amax)
        assert s.update()
        assert s.get_scale() == f32(want), (amax, s.get_scale(), want)
        assert s.get_scale_inv() == f32(1 / f32(want))
        assert s.props.scale == s.get_scale()
    assert [math.isnan(v) for v in s.get_amax_history()] == [False, True]
    assert s.get_amax_history()[0] == 0.0


def test_history_bytes():
    r = Mixprec.Fp8Recipe.new_delayed(Mixprec.Fp8Format.E4M3, 3, Mixprec.Fp8AmaxAlgo.MOST_RECENT, 0)
    s = r.new_scaling(Mixprec.Fp8Role.FORWARD)
    for amax in (1.5, 2.5):
        s.record_amax(amax)
        s.update()
    s.record_amax(0.25)
    data = s.dup_amax_history().get_data()
    assert list(struct.unpack('=3f', data)) == [0.25, 1.5, 2.5]
    assert s.get_amax_history() == [0.25, 1.5, 2.5]


def test_keyword_construction():
    r = Mixprec.Fp8Recipe(kind=Mixprec.Fp8RecipeKind.CURRENT, format=Mixprec.Fp8Format.E4M3,
                          margin=2, saturate=False)
    assert r.get_kind() == Mixprec.Fp8RecipeKind.CURRENT
    assert r.get_margin() == 2 and not r.get_saturate()
    assert r.get_amax_history_len() == 1 and r.get_block_size() == 0
    s = r.new_scaling(Mixprec.Fp8Role.BACKWARD)
    assert s.get_dtype() == Mixprec.DType.FLOAT8_E4M3
    s.record_amax(7.0)
    s.update()
    assert s.get_scale() == f32(f32(448 / 7) / 4)


def test_mx_has_no_scale():
    r = Mixprec.Fp8Recipe.new_mx(Mixprec.Fp8Format.HYBRID, 32)
    s = r.new_scaling(Mixprec.Fp8Role.FORWARD)
    s.record_amax(5.0)
    assert s.update()
    assert s.get_scale() == 1.0 and s.get_scale_inv() == 1.0
    assert s.get_amax_history() == []
    assert s.dup_amax_history().get_size() == 0
    assert r.get_dtype(Mixprec.Fp8Role.BACKWARD) == Mixprec.DType.FLOAT8_E5M2


def test_errors():
    for make, fragment in [
        (lambda: Mixprec.Fp8Recipe.new_delayed(Mixprec.Fp8Format.HYBRID, 0, Mixprec.Fp8AmaxAlgo.MAX, 0),
         'amax_history_len'),
        (lambda: Mixprec.Fp8Recipe.new_current(Mixprec.Fp8Format.HYBRID, 65), 'margin'),
        (lambda: Mixprec.Fp8Recipe.new_mx(Mixprec.Fp8Format.E4M3, 16), 'block size'),
    ]:
        try:
            make()
        except GLib.Error as e:
            assert e.matches(Mixprec.fp8_recipe_error_quark(), Mixprec.Fp8RecipeError.OUT_OF_RANGE)
            assert fragment in e.message, e.message
        else:
            raise AssertionError('no error for ' + fragment)


def test_state_round_trip():
    r = Mixprec.Fp8Recipe.new_delayed(Mixprec.Fp8Format.HYBRID, 4, Mixprec.Fp8AmaxAlgo.MAX, 0)
    a = r.new_scaling(Mixprec.Fp8Role.FORWARD)
    for amax in (3.0, 0.5, float('inf')):
        a.record_amax(amax)
        a.update()
    state = a.save_state()
    assert state.get_type_string() == 'a{sv}'
    assert state.unpack()['recipe'] == 'delayed'
    assert state.unpack()['dtype'] == 'float8_e4m3'
    b = r.new_scaling(Mixprec.Fp8Role.FORWARD)
    assert b.restore_state(state)
    assert b.get_scale() == a.get_scale() and b.get_amax_history() == a.get_amax_history()

    bad = dict(state.unpack())
    bad['scale'] = -1.0
    bad_state = GLib.Variant('a{sv}', {
        'recipe': GLib.Variant('s', bad['recipe']), 'dtype': GLib.Variant('s', bad['dtype']),
        'scale': GLib.Variant('d', bad['scale']),
        'amax_history': GLib.Variant('ad', bad['amax_history'])})
    c = r.new_scaling(Mixprec.Fp8Role.FORWARD)
    try:
        c.restore_state(bad_state)
    except GLib.Error as e:
        assert e.matches(Mixprec.fp8_recipe_error_quark(), Mixprec.Fp8RecipeError.INVALID_STATE)
        assert '“scale”' in e.message, e.message
    else:
        raise AssertionError('a negative scale was restored')
    assert c.get_scale() == 1.0


def test_config_section():
    off = Mixprec.Config.new_from_data('{}')
    assert off.get_fp8_recipe() is None
    assert off.get_fp8_modules() == ['Linear']
    on = Mixprec.Config.new_from_data(
        '{"bf16": {"enabled": true}, "fp8": {"enabled": true, "recipe": "delayed",'
        ' "amax_history_len": 16, "amax_compute_algo": "most_recent", "margin": 1,'
        ' "modules": ["Linear", "Conv1d"]}}')
    r = on.get_fp8_recipe()
    assert r.get_kind() == Mixprec.Fp8RecipeKind.DELAYED
    assert r.get_amax_history_len() == 16 and r.get_margin() == 1
    assert r.get_amax_compute_algo() == Mixprec.Fp8AmaxAlgo.MOST_RECENT
    assert on.get_fp8_modules() == ['Linear', 'Conv1d']
    policy = Mixprec.PrecisionPolicy.new_from_config(on)
    assert policy.is_fp8('fc.weight', 'torch.nn.Linear')
    assert not policy.is_fp8('ln.weight', 'LayerNorm')
    assert not policy.is_fp8('fc.weight', None)


def main():
    tests = [(name, fn) for name, fn in globals().items()
             if name.startswith('test_') and callable(fn)]
    print('1..%d' % len(tests))
    failed = 0
    for i, (name, fn) in enumerate(tests, 1):
        try:
            fn()
        except Exception:
            failed += 1
            print('not ok %d - %s' % (i, name))
            for line in traceback.format_exc().splitlines():
                print('# ' + line)
        else:
            print('ok %d - %s' % (i, name))
    sys.stdout.flush()
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
