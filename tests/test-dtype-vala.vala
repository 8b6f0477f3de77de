/* test-dtype-vala.vala — the library through the Vala bindings (mixprec.vapi
 * generated from the GIR): version constants and a conversion with known bits. */

static void test_version () {
    assert (Mixprec.MAJOR_VERSION == Mixprec.get_major_version ());
    assert (Mixprec.MINOR_VERSION == Mixprec.get_minor_version ());
    assert (Mixprec.check_version (Mixprec.MAJOR_VERSION, 0, 0) == null);
}

static void test_convert_bf16 () {
    /* 1.0f = 0x3F800000 -> bf16 0x3F80; -2.0f = 0xC0000000 -> 0xC000 */
    float[] src = { 1.0f, -2.0f };
    uint8[] raw = new uint8[8];
    Memory.copy (raw, src, 8);
    try {
        var out = Mixprec.convert (Mixprec.DType.FLOAT32, new Bytes (raw),
                                   Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0);
        unowned uint8[] d = out.get_data ();
        assert (d.length == 4);
        assert ((d[0] | (d[1] << 8)) == 0x3F80);
        assert ((d[2] | (d[3] << 8)) == 0xC000);
    } catch (Error e) {
        assert_not_reached ();
    }
}

static void test_convert_error () {
    uint8[] raw = { 1, 2, 3 };
    try {
        Mixprec.convert (Mixprec.DType.FLOAT32, new Bytes (raw),
                         Mixprec.DType.BFLOAT16, Mixprec.Rounding.NEAREST_EVEN, 0);
        assert_not_reached ();
    } catch (Mixprec.DTypeError.INVALID_LENGTH e) {
        assert (e.message.length > 0);
    } catch (Error e) {
        assert_not_reached ();
    }
}

int main (string[] args) {
    Test.init (ref args);
    Test.add_func ("/vala/version", test_version);
    Test.add_func ("/vala/convert/bf16", test_convert_bf16);
    Test.add_func ("/vala/convert/error", test_convert_error);
    return Test.run ();
}
