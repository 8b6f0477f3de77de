// test-dtype-gi.js — the library through GObject Introspection from gjs:
// version constants and conversions with bits known from the formats.
imports.gi.versions.Mixprec = '1.0';
const GLib = imports.gi.GLib;
const Mixprec = imports.gi.Mixprec;

const results = [];
function check(name, cond) {
    results.push([name, !!cond]);
}

function f32Bytes(values) {
    const buf = new ArrayBuffer(values.length * 4);
    const view = new DataView(buf);
    values.forEach((v, i) => view.setFloat32(i * 4, v, true));
    return new GLib.Bytes(new Uint8Array(buf));
}

function u16(bytes) {
    const data = bytes.toArray();
    const out = [];
    for (let i = 0; i + 1 < data.length; i += 2)
        out.push(data[i] | (data[i + 1] << 8));
    return out;
}

check('version constants match run-time version',
    Mixprec.MAJOR_VERSION === Mixprec.get_major_version() &&
    Mixprec.MINOR_VERSION === Mixprec.get_minor_version() &&
    Mixprec.MICRO_VERSION === Mixprec.get_micro_version());

// 1.0 -> 0x3F80; 1 + 2^-8 ties to even -> 0x3F80; 1 + 3*2^-8 ties to even -> 0x3F82.
let out = Mixprec.convert(Mixprec.DType.FLOAT32, f32Bytes([1.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8]),
    Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0);
check('fp32 -> bf16 nearest-even bits', JSON.stringify(u16(out)) === JSON.stringify([0x3F80, 0x3F80, 0x3F82]));

// 65504 -> 0x7BFF (max), 65520 -> 0x7C00 (inf), 2^-24 -> 0x0001 (min subnormal).
out = Mixprec.convert(Mixprec.DType.FLOAT32, f32Bytes([65504, 65520, 2 ** -24]),
    Mixprec.DType.FLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0);
check('fp32 -> fp16 max, overflow, subnormal', JSON.stringify(u16(out)) === JSON.stringify([0x7BFF, 0x7C00, 0x0001]));

try {
    Mixprec.convert(Mixprec.DType.FLOAT32, new GLib.Bytes(new Uint8Array([1, 2, 3])),
        Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0);
    check('bad length throws', false);
} catch (e) {
    check('bad length throws', e.matches(Mixprec.dtype_error_quark(), Mixprec.DTypeError.INVALID_LENGTH));
}

print(`1..${results.length}`);
results.forEach(([name, ok], i) => print(`${ok ? 'ok' : 'not ok'} ${i + 1} - ${name}`));
if (!results.every(([, ok]) => ok))
    imports.system.exit(1);
