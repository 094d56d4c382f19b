// Integer and floating-point arithmetic for every C scalar width.
// out0 = a*b + c, out1 = a - b, out2 = (a ^ b) | (c >> 1) for ints,
// out3 = min/max mix, out4 = shift left by a small amount (unsigned and signed).
// NVRTC has no <stdint.h>; spell the fixed-width types out.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

#define INT_ARITH_KERNEL(NAME, T)                                                        \
    extern "C" __global__ void NAME(T* out, const T* a, const T* b, const T* c, int n)   \
    {                                                                                    \
        int i = blockIdx.x * blockDim.x + threadIdx.x;                                   \
        if (i >= n) return;                                                              \
        T x = a[i], y = b[i], z = c[i];                                                  \
        out[5 * i + 0] = (T)(x * y + z);                                                 \
        out[5 * i + 1] = (T)(x - y);                                                     \
        out[5 * i + 2] = (T)((x ^ y) | (z >> 1));                                        \
        out[5 * i + 3] = (T)(x < y ? (z > y ? z : y) : (x & ~z));                        \
        out[5 * i + 4] = (T)((T)(x & 0x3f) << 2);                                        \
    }

INT_ARITH_KERNEL(arith_i8, int8_t)
INT_ARITH_KERNEL(arith_u8, uint8_t)
INT_ARITH_KERNEL(arith_i16, int16_t)
INT_ARITH_KERNEL(arith_u16, uint16_t)
INT_ARITH_KERNEL(arith_i32, int32_t)
INT_ARITH_KERNEL(arith_u32, uint32_t)
INT_ARITH_KERNEL(arith_i64, int64_t)
INT_ARITH_KERNEL(arith_u64, uint64_t)

// Inputs are multiples of 1/16 of modest size, so every result below is exact
// whether or not the compiler contracts a*b+c into an fma.
#define FLOAT_ARITH_KERNEL(NAME, T, SQRT, FABS)                                          \
    extern "C" __global__ void NAME(T* out, const T* a, const T* b, const T* c, int n)   \
    {                                                                                    \
        int i = blockIdx.x * blockDim.x + threadIdx.x;                                   \
        if (i >= n) return;                                                              \
        T x = a[i], y = b[i], z = c[i];                                                  \
        out[5 * i + 0] = x * y + z;                                                      \
        out[5 * i + 1] = x - y * (T)2;                                                   \
        out[5 * i + 2] = x / (FABS(y) + (T)1);                                           \
        out[5 * i + 3] = SQRT(FABS(z));                                                  \
        out[5 * i + 4] = x < y ? -z : (z > (T)0 ? x : y);                                \
    }

FLOAT_ARITH_KERNEL(arith_f32, float, sqrtf, fabsf)
FLOAT_ARITH_KERNEL(arith_f64, double, sqrt, fabs)
