// Inline PTX assembly.

extern "C" __global__ void asm_add(int* out, const int* a, const int* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int r;
    asm("add.s32 %0, %1, %2;" : "=r"(r) : "r"(a[i]), "r"(b[i]));
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    out[2 * i + 0] = r;
    out[2 * i + 1] = (int)lane;
}

// An asm block with its own scope and .reg declarations, predicates and 64-bit
// registers.
extern "C" __global__ void asm_block(unsigned long long* out, const unsigned* a, const unsigned* b,
                                     int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned x = a[i], y = b[i];
    unsigned long long wide;
    unsigned mx;
    asm("{\n\t"
        ".reg .u32 t;\n\t"
        ".reg .pred p;\n\t"
        "mul.lo.u32 t, %2, 3;\n\t"
        "setp.gt.u32 p, t, %3;\n\t"
        "selp.u32 %1, t, %3, p;\n\t"
        "mul.wide.u32 %0, %2, %3;\n\t"
        "}"
        : "=l"(wide), "=r"(mx)
        : "r"(x), "r"(y));
    out[2 * i + 0] = wide;
    out[2 * i + 1] = mx;
}

// Reading a float through an asm ld.global and a memory clobber.
extern "C" __global__ void asm_load_store(float* out, const float* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v;
    asm volatile("ld.global.f32 %0, [%1];" : "=f"(v) : "l"(in + i) : "memory");
    v = v * 2.0f;
    asm volatile("st.global.f32 [%0], %1;" : : "l"(out + i), "f"(v) : "memory");
}
