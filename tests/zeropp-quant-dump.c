/* zeropp-quant-dump.c — the library's ZeRO++ quantizer on a file of
 * values, for tests/test-zeropp-quant.py to hold against its own
 * transcription of DeepSpeed's kernels.
 *
 *   zeropp-quant-dump quantize DTYPE BITS GROUPS IN OUT
 *     IN: raw little-endian values of DTYPE (f32, bf16 or f16); GROUPS 0
 *     takes DeepSpeed's weight grouping of the element count. OUT: the
 *     block count (u64), the codes, the stored scales (f32), then the
 *     dequantized values as fp16 and as DTYPE.
 *   zeropp-quant-dump groups N...
 *     prints DeepSpeed's weight block count of each N (0: refused).
 *   zeropp-quant-dump swizzle NODES DEVICES
 *     prints where each partition goes.
 *   zeropp-quant-dump fp8 DTYPE FORMAT GROUPS IN OUT
 *     the FP8 blocks of mixprec.quantized_*_format (FORMAT e4m3 or e5m2)
 *     in GROUPS equal blocks. OUT: the codes (a byte each), the stored
 *     scales (f32), then the dequantized values as f32.
 *   zeropp-quant-dump reduce BITS TENSORS IN_GROUPS OUT_GROUPS IN OUT
 *     IN: raw float32 values, TENSORS equal tensors one after the other;
 *     each quantized to BITS in IN_GROUPS blocks, then dequantized,
 *     summed and requantized in OUT_GROUPS blocks as quant_reduce.cu
 *     does. OUT: the requantized codes, then their stored scales. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "mixprec-zeropp-private.h"
#include "numeric/numeric-zeropp.h"

static MixprecDType
parse_dtype (const char *s)
{
  if (g_str_equal (s, "bf16"))
    return MIXPREC_DTYPE_BFLOAT16;
  if (g_str_equal (s, "f16"))
    return MIXPREC_DTYPE_FLOAT16;
  return MIXPREC_DTYPE_FLOAT32;
}

static int
quantize (char **argv)
{
  MixprecDType dtype = parse_dtype (argv[0]);
  guint bits = (guint) atoi (argv[1]);
  guint64 groups = g_ascii_strtoull (argv[2], NULL, 10);
  gsize esize = mixprec_dtype_get_size (dtype);
  g_autofree gchar *in = NULL;
  g_autofree gint8 *codes = NULL;
  g_autofree gfloat *scales = NULL;
  g_autofree guint16 *half = NULL;
  g_autofree guint8 *same = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) out = g_string_new (NULL);
  gsize len = 0;
  guint64 n;

  if (!g_file_get_contents (argv[3], &in, &len, &error))
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  n = len / esize;
  if (groups == 0)
    groups = _mixprec_zeropp_weight_groups (n);
  if (groups == 0 || n % groups != 0 || (bits == 4 && (n / groups) % 2 != 0))
    {
      g_printerr ("%" G_GUINT64_FORMAT " elements cannot be cut into blocks\n", n);
      return 1;
    }
  codes = g_new (gint8, _mixprec_zeropp_code_bytes (n, bits));
  scales = g_new (gfloat, groups);
  half = g_new (guint16, n);
  same = g_malloc (n * esize);
  _mixprec_zeropp_quantize (in, dtype, n, groups, bits, codes, scales);
  _mixprec_zeropp_dequantize (codes, scales, n, groups, bits, half, MIXPREC_DTYPE_FLOAT16);
  _mixprec_zeropp_dequantize (codes, scales, n, groups, bits, same, dtype);
  g_string_append_len (out, (const gchar *) &groups, sizeof groups);
  g_string_append_len (out, (const gchar *) codes, (gssize) _mixprec_zeropp_code_bytes (n, bits));
  g_string_append_len (out, (const gchar *) scales, (gssize) (groups * sizeof (gfloat)));
  g_string_append_len (out, (const gchar *) half, (gssize) (n * 2));
  g_string_append_len (out, (const gchar *) same, (gssize) (n * esize));
  if (!g_file_set_contents (argv[4], out->str, (gssize) out->len, &error))
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  return 0;
}

static int
fp8 (char **argv)
{
  MixprecDType dtype = parse_dtype (argv[0]);
  _MixprecZeroppFormat format = g_str_equal (argv[1], "e5m2") ? _MIXPREC_ZEROPP_FP8_E5M2
                                                             : _MIXPREC_ZEROPP_FP8_E4M3;
  guint64 groups = g_ascii_strtoull (argv[2], NULL, 10);
  gsize esize = mixprec_dtype_get_size (dtype);
  g_autofree gchar *in = NULL;
  g_autofree guint8 *codes = NULL;
  g_autofree gfloat *scales = NULL, *back = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) out = g_string_new (NULL);
  gsize len = 0;
  guint64 n;

  if (!g_file_get_contents (argv[3], &in, &len, &error))
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  n = len / esize;
  if (groups == 0 || n % groups != 0)
    {
      g_printerr ("%" G_GUINT64_FORMAT " elements cannot be cut into %" G_GUINT64_FORMAT " blocks\n",
                  n, groups);
      return 1;
    }
  codes = g_new (guint8, n);
  scales = g_new (gfloat, groups);
  back = g_new (gfloat, n);
  _mixprec_zeropp_quantize_as (in, dtype, n, groups, format, codes, scales);
  _mixprec_zeropp_dequantize_as (codes, scales, n, groups, format, back, MIXPREC_DTYPE_FLOAT32);
  g_string_append_len (out, (const gchar *) codes, (gssize) n);
  g_string_append_len (out, (const gchar *) scales, (gssize) (groups * sizeof (gfloat)));
  g_string_append_len (out, (const gchar *) back, (gssize) (n * sizeof (gfloat)));
  if (!g_file_set_contents (argv[4], out->str, (gssize) out->len, &error))
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  return 0;
}

static int
reduce (char **argv)
{
  guint bits = (guint) atoi (argv[0]);
  guint tensors = (guint) atoi (argv[1]);
  guint64 in_groups = g_ascii_strtoull (argv[2], NULL, 10);
  guint64 out_groups = g_ascii_strtoull (argv[3], NULL, 10);
  g_autofree gchar *in = NULL;
  g_autofree gint8 *codes = NULL, *out_codes = NULL;
  g_autofree gfloat *scales = NULL, *out_scales = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) out = g_string_new (NULL);
  gsize len = 0;
  guint64 elems;

  if (!g_file_get_contents (argv[4], &in, &len, &error))
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  elems = len / 4 / tensors;
  codes = g_new (gint8, _mixprec_zeropp_code_bytes (elems * tensors, bits));
  scales = g_new (gfloat, in_groups * tensors);
  out_codes = g_new (gint8, _mixprec_zeropp_code_bytes (elems, bits));
  out_scales = g_new (gfloat, out_groups);
  for (guint j = 0; j < tensors; j++)
    _mixprec_zeropp_quantize ((const gfloat *) (gconstpointer) in + j * elems, MIXPREC_DTYPE_FLOAT32,
                              elems, in_groups, bits,
                              codes + _mixprec_zeropp_code_bytes (j * elems, bits),
                              scales + j * in_groups);
  _mixprec_zeropp_quant_reduce (codes, scales, tensors, elems, in_groups, out_groups, bits,
                                out_codes, out_scales);
  g_string_append_len (out, (const gchar *) out_codes, (gssize) _mixprec_zeropp_code_bytes (elems, bits));
  g_string_append_len (out, (const gchar *) out_scales, (gssize) (out_groups * sizeof (gfloat)));
  if (!g_file_set_contents (argv[5], out->str, (gssize) out->len, &error))
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  return 0;
}

int
main (int argc, char **argv)
{
  if (argc >= 8 && g_str_equal (argv[1], "reduce"))
    return reduce (argv + 2);
  if (argc >= 7 && g_str_equal (argv[1], "quantize"))
    return quantize (argv + 2);
  if (argc >= 7 && g_str_equal (argv[1], "fp8"))
    return fp8 (argv + 2);
  if (argc >= 2 && g_str_equal (argv[1], "groups"))
    {
      for (int i = 2; i < argc; i++)
        g_print ("%" G_GUINT64_FORMAT "\n", _mixprec_zeropp_weight_groups (g_ascii_strtoull (argv[i], NULL, 10)));
      return 0;
    }
  if (argc == 4 && g_str_equal (argv[1], "swizzle"))
    {
      guint64 nodes = g_ascii_strtoull (argv[2], NULL, 10);
      guint64 devices = g_ascii_strtoull (argv[3], NULL, 10);

      for (guint64 p = 0; p < nodes * devices; p++)
        g_print ("%" G_GUINT64_FORMAT "\n", _mixprec_zpp_swizzle_partition (p, nodes, devices));
      return 0;
    }
  g_printerr ("usage: zeropp-quant-dump quantize DTYPE BITS GROUPS IN OUT | groups N... | "
              "swizzle NODES DEVICES\n");
  return 2;
}
