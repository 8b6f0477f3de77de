#!/usr/bin/env python3
# test-loss-scaler-gi.py — the loss scalers through GObject Introspection:
# DeepSpeed's published sequences, keyword construction, errors as
# GLib.Error, and saved states as GLib.Variant. Prints TAP.

import sys
import traceback

import gi

gi.require_version('Mixprec', '1.0')
from gi.repository import GLib, Mixprec  # noqa: E402

O, C = True, False

# As under GTest: a critical or a warning from the library is a failure
# (it aborts, and the missing results fail the TAP plan).
GLib.log_set_always_fatal(GLib.LogLevelFlags.LEVEL_CRITICAL | GLib.LogLevelFlags.LEVEL_WARNING)


def run(scaler, pattern):
    scales = []
    for overflow in pattern:
        assert scaler.update(overflow)
        scales.append(scaler.get_scale())
    return scales


# The table of DeepSpeed's tests/unit/runtime/half_precision/test_dynamic_loss_scale.py.
def test_deepspeed_no_overflow():
    s = Mixprec.DynamicScaler.new_deepspeed(256, 2, 2, 1)
    assert run(s, [C] * 10) == [256, 256, 512, 512, 1024, 1024, 2048, 2048, 4096, 4096]
    assert s.get_steps() == 10 and s.get_overflows() == 0


def test_deepspeed_all_overflow():
    s = Mixprec.DynamicScaler(init_scale=256.0, scale_window=2, hysteresis=1)
    assert run(s, [O] * 8) == [128, 64, 32, 16, 8, 4, 2, 1]
    assert s.get_overflows() == 8


def test_deepspeed_some_overflow():
    s = Mixprec.DynamicScaler.new_deepspeed(256, 2, 1, 1)
    assert run(s, [O, O]) == [128, 64]
    assert run(s, [C, C, C]) == [64, 64, 128]
    assert run(s, [O]) == [64]


def test_deepspeed_at_minimum_error():
    s = Mixprec.DynamicScaler.new_deepspeed(2, 2, 1, 1)
    assert run(s, [O]) == [1]
    try:
        s.update(True)
    except GLib.Error as e:
        assert e.matches(Mixprec.scaler_error_quark(), Mixprec.ScalerError.AT_MINIMUM)
        assert e.domain == 'mixprec-scaler-error-quark'
        assert e.code == int(Mixprec.ScalerError.AT_MINIMUM)
        assert 'Current loss scale already at minimum - cannot decrease scale anymore' in e.message
    else:
        raise AssertionError('no error at the minimum')
    # Refused: nothing counted, scale unchanged.
    assert s.get_steps() == 1 and s.get_scale() == 1
    s.props.raise_at_min_scale = False
    assert run(s, [O]) == [1]


def test_keyword_construction():
    defaults = {
        Mixprec.ScalerSemantics.DEEPSPEED: (65536.0, 1000, 2, 1.0, True),
        Mixprec.ScalerSemantics.TORCH: (65536.0, 2000, 1, 0.0, False),
        Mixprec.ScalerSemantics.MEGATRON: (4294967296.0, 1000, 2, 1.0, False),
    }
    for semantics, (init, window, hyst, min_scale, raise_) in defaults.items():
        s = Mixprec.DynamicScaler(semantics=semantics)
        p = s.props
        assert p.semantics == semantics
        assert (p.init_scale, p.scale_window, p.hysteresis, p.min_scale,
                p.raise_at_min_scale) == (init, window, hyst, min_scale, raise_)
        assert p.scale == init and p.growth_factor == 2.0 and p.backoff_factor == 0.5
        assert p.max_scale == 0.0 and not p.consecutive_hysteresis
        assert s.get_semantics() == semantics

        t = Mixprec.DynamicScaler(semantics=semantics, init_scale=1024.0, scale_window=3,
                                  hysteresis=4, min_scale=0.5, max_scale=4096.0,
                                  growth_factor=4.0, backoff_factor=0.25,
                                  consecutive_hysteresis=True, raise_at_min_scale=False)
        q = t.props
        assert (q.scale, q.init_scale, q.scale_window, q.hysteresis, q.min_scale,
                q.max_scale, q.growth_factor, q.backoff_factor, q.consecutive_hysteresis,
                q.raise_at_min_scale) == (1024.0, 1024.0, 3, 4, 0.5, 4096.0, 4.0, 0.25,
                                          True, False)

    st = Mixprec.StaticScaler(init_scale=128.0)
    assert isinstance(st, Mixprec.LossScaler)
    assert run(st, [O, C, O]) == [128, 128, 128]
    assert st.get_overflows() == 2
    assert Mixprec.StaticScaler.new(8.0).props.scale == 8.0


def test_torch_sequence():
    # interval 3: C C C -> x2; O -> x0.5; C C; O -> x0.5; C C C -> x2.
    s = Mixprec.DynamicScaler(semantics=Mixprec.ScalerSemantics.TORCH,
                              init_scale=1024.0, scale_window=3)
    assert run(s, [C, C, C, O, C, C, O, C, C, C]) == \
        [1024, 1024, 2048, 1024, 1024, 1024, 512, 512, 512, 1024]
    # Single precision: 100 * 0.3 formed in double rounds to float 30.
    t = Mixprec.DynamicScaler(semantics=Mixprec.ScalerSemantics.TORCH,
                              init_scale=100.0, backoff_factor=0.3)
    assert run(t, [O]) == [30.0]


def test_megatron_sequence():
    # window 3, hysteresis 2: the hysteresis counts down on every overflow
    # and is refilled only when the scale grows.
    s = Mixprec.DynamicScaler(semantics=Mixprec.ScalerSemantics.MEGATRON,
                              init_scale=1024.0, scale_window=3)
    assert run(s, [O, O, O, C, C, C, O, C, O]) == \
        [1024, 512, 256, 256, 256, 512, 512, 512, 256]
    # A float32 product: 100 * (float)0.3 rounds to 30 + 2^-19.
    t = Mixprec.DynamicScaler(semantics=Mixprec.ScalerSemantics.MEGATRON,
                              init_scale=100.0, hysteresis=1, backoff_factor=0.3)
    assert run(t, [O]) == [30.0000019073486328125]


def test_save_restore():
    pattern = [O, C, C, O, O, C, C, C, C, O, C, C, C, C, C, C, C]
    a = Mixprec.DynamicScaler(semantics=Mixprec.ScalerSemantics.MEGATRON,
                              init_scale=4096.0, scale_window=4)
    run(a, pattern[:7])
    state = a.save_state()
    assert isinstance(state, GLib.Variant)
    assert state.get_type_string() == 'a{sv}'
    d = state.unpack()
    assert d['type'] == 'MixprecDynamicScaler' and d['semantics'] == 'megatron'
    assert d['steps'] == 7 and d['overflows'] == 3

    b = Mixprec.DynamicScaler(semantics=Mixprec.ScalerSemantics.MEGATRON)
    assert b.restore_state(state)
    assert b.props.scale_window == 4 and b.get_steps() == 7
    assert run(a, pattern[7:]) == run(b, pattern[7:])

    # A state built in Python with one key of the wrong type is refused.
    bad = dict(state.unpack())
    items = {k: GLib.Variant(state.lookup_value(k, None).get_type_string(), v)
             for k, v in bad.items()}
    items['scale'] = GLib.Variant('i', 3)
    try:
        b.restore_state(GLib.Variant('a{sv}', items))
    except GLib.Error as e:
        assert e.matches(Mixprec.scaler_error_quark(), Mixprec.ScalerError.INVALID_STATE)
        assert '“scale”' in e.message
    else:
        raise AssertionError('a wrongly typed state was accepted')

    # Another semantics, another kind of scaler.
    for other in (Mixprec.DynamicScaler(semantics=Mixprec.ScalerSemantics.TORCH),
                  Mixprec.StaticScaler(init_scale=2.0)):
        try:
            other.restore_state(state)
        except GLib.Error as e:
            assert e.code == int(Mixprec.ScalerError.INVALID_STATE)
        else:
            raise AssertionError('a foreign state was accepted')


def test_from_config():
    def scaler(json):
        return Mixprec.LossScaler.new_from_config(Mixprec.Config.new_from_data(json))

    s = scaler('{"fp16": {"enabled": true, "initial_scale_power": 8,'
               ' "loss_scale_window": 2, "hysteresis": 1}}')
    assert isinstance(s, Mixprec.DynamicScaler)
    assert run(s, [O] * 8) == [128, 64, 32, 16, 8, 4, 2, 1]
    t = scaler('{"fp16": {"enabled": true},'
               ' "mixprec": {"scaler": {"semantics": "torch"}}}')
    assert t.props.semantics == Mixprec.ScalerSemantics.TORCH
    assert t.props.scale_window == 2000
    u = scaler('{"fp16": {"enabled": true, "loss_scale": 128}}')
    assert isinstance(u, Mixprec.StaticScaler) and u.props.scale == 128
    v = scaler('{"bf16": {"enabled": true}}')
    assert isinstance(v, Mixprec.StaticScaler) and v.props.scale == 1


class HalvingScaler(Mixprec.LossScaler):
    """A scaler written in Python: halves on overflow, never grows."""

    def __init__(self):
        super().__init__()
        self.value = 64.0

    def do_get_scale(self):
        return self.value

    def do_update(self, overflow):
        if overflow:
            self.value /= 2
        return True

    def do_fill_state(self, state):
        state.insert_value('value', GLib.Variant('d', self.value))

    def do_apply_state(self, state):
        self.value = state.lookup_value('value', GLib.VariantType.new('d')).get_double()
        return True


def test_subclass():
    a = HalvingScaler()
    assert run(a, [O, C, O]) == [32, 32, 16]
    # The base class counts and frames the state.
    assert a.get_steps() == 3 and a.get_overflows() == 2
    state = a.save_state().unpack()
    assert state['value'] == 16 and state['steps'] == 3
    b = HalvingScaler()
    assert b.restore_state(a.save_state())
    assert b.get_scale() == 16 and b.get_steps() == 3


def test_notify_scale():
    s = Mixprec.DynamicScaler.new_deepspeed(8, 1000, 1, 1)
    seen = []
    s.connect('notify::scale', lambda obj, pspec: seen.append(obj.props.scale))
    run(s, [O, C, O])
    assert seen == [4.0, 2.0]


def test_user_values_raise():
    # Issue 15, item 8: a user's -1.0 is a GLib.Error, not a critical and
    # "constructor returned NULL".
    s = Mixprec.DynamicScaler.new_deepspeed_full(256, 2, 2, 1)
    assert s.get_scale() == 256
    for args, needle in [((-1.0, 2, 2, 1), 'init_scale'), ((256, 0, 2, 1), 'scale_window'),
                         ((256, 2, 0, 1), 'hysteresis'), ((256, 2, 2, -1), 'min_scale')]:
        try:
            Mixprec.DynamicScaler.new_deepspeed_full(*args)
            assert False, args
        except GLib.Error as e:
            assert e.matches(Mixprec.scaler_error_quark(), Mixprec.ScalerError.INVALID_CONFIG)
            assert needle in e.message, e.message
    try:
        Mixprec.StaticScaler.new_full(float('nan'))
        assert False
    except GLib.Error as e:
        assert 'scale: must be a finite number' in e.message, e.message
    assert Mixprec.StaticScaler.new_full(8).get_scale() == 8


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
