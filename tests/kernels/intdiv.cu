// Division and remainder for every integer width (C semantics: truncation
// toward zero; the remainder takes the sign of the dividend). Divisors are
// never zero and INT_MIN / -1 never occurs.
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

#define DIVREM_KERNEL(NAME, T)                                                           \
    extern "C" __global__ void NAME(T* q, T* r, const T* a, const T* b, int n)           \
    {                                                                                    \
        int i = blockIdx.x * blockDim.x + threadIdx.x;                                   \
        if (i >= n) return;                                                              \
        T x = a[i], y = b[i];                                                            \
        q[2 * i + 0] = (T)(x / y);                                                       \
        r[2 * i + 0] = (T)(x % y);                                                       \
        q[2 * i + 1] = (T)(x / (T)7);   /* division by a constant: mul.hi tricks */     \
        r[2 * i + 1] = (T)(x % (T)16);  /* remainder by a power of two */               \
    }

DIVREM_KERNEL(divrem_i8, int8_t)
DIVREM_KERNEL(divrem_u8, uint8_t)
DIVREM_KERNEL(divrem_i16, int16_t)
DIVREM_KERNEL(divrem_u16, uint16_t)
DIVREM_KERNEL(divrem_i32, int32_t)
DIVREM_KERNEL(divrem_u32, uint32_t)
DIVREM_KERNEL(divrem_i64, int64_t)
DIVREM_KERNEL(divrem_u64, uint64_t)
