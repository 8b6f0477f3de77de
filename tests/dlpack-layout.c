/* dlpack-layout.c — prints the layout of DLPack's structures as the
 * installed dlpack.h declares them, for test-views-gi.py to compare with
 * the ctypes declarations of the Python overrides. */
#include <stddef.h>
#include <stdio.h>

#include <dlpack/dlpack.h>

#define FIELD(type, field) \
  printf ("%s.%s %zu %zu\n", #type, #field, offsetof (type, field), sizeof (((type *) 0)->field))

int
main (void)
{
  printf ("DLPACK_VERSION %d\n", DLPACK_VERSION);
  printf ("DLDevice %zu\n", sizeof (DLDevice));
  FIELD (DLDevice, device_type);
  FIELD (DLDevice, device_id);
  printf ("DLDataType %zu\n", sizeof (DLDataType));
  FIELD (DLDataType, code);
  FIELD (DLDataType, bits);
  FIELD (DLDataType, lanes);
  printf ("DLTensor %zu\n", sizeof (DLTensor));
  FIELD (DLTensor, data);
  FIELD (DLTensor, device);
  FIELD (DLTensor, ndim);
  FIELD (DLTensor, dtype);
  FIELD (DLTensor, shape);
  FIELD (DLTensor, strides);
  FIELD (DLTensor, byte_offset);
  printf ("DLManagedTensor %zu\n", sizeof (DLManagedTensor));
  FIELD (DLManagedTensor, dl_tensor);
  FIELD (DLManagedTensor, manager_ctx);
  FIELD (DLManagedTensor, deleter);
  printf ("kDLCPU %d\nkDLCUDAHost %d\nkDLFloat %d\nkDLBfloat %d\nkDLUInt %d\n",
          (int) kDLCPU, (int) kDLCUDAHost, (int) kDLFloat, (int) kDLBfloat, (int) kDLUInt);
  return 0;
}
