// A dense switch: large enough that the compiler may use a jump table (brx.idx).

__device__ __noinline__ int dispatch(int op, int a, int b)
{
    switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a & b;
    case 4: return a | b;
    case 5: return a ^ b;
    case 6: return (int)((unsigned)a << (b & 15));
    case 7: return a >> (b & 15);
    case 8: return a > b ? a : b;
    case 9: return a < b ? a : b;
    case 10: return -a;
    case 11: return ~b;
    case 12: return a * 3 + b;
    case 13: return (a + 7) * (b - 2);
    case 14: return b == 0 ? 0 : a / b;
    case 15: return a == b;
    case 16: return a * a - b;
    case 17: return (a ^ 0x5a5a) + b;
    default: return 12345;
    }
}

extern "C" __global__ void big_switch(int* out, const int* ops, const int* a, const int* b, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int op = ops[i];
    int x = a[i], y = b[i];
    int r;
    // the same switch inline in the kernel, plus the out-of-line copy
    switch (op) {
    case 0: r = x + 1; break;
    case 1: r = x * 2; break;
    case 2: r = x - y; break;
    case 3: r = y * 5; break;
    case 4: r = x ^ 0xff; break;
    case 5: r = x | 0x100; break;
    case 6: r = y - 100; break;
    case 7: r = x + y + 1; break;
    case 8: r = 42; break;
    case 9: r = x * y; break;
    case 10: r = -y; break;
    case 11: r = x >> 2; break;
    case 12: r = (int)((unsigned)y << 3); break;
    case 13: r = x & y; break;
    case 14: r = x + 1000; break;
    case 15: r = y + 2000; break;
    default: r = -1; break;
    }
    out[2 * i + 0] = r;
    out[2 * i + 1] = dispatch(op, x, y);
}

// An explicit jump table written in inline PTX (brx.idx with .branchtargets),
// because NVVM lowers C++ switches to compare chains.
extern "C" __global__ void asm_jump_table(int* out, const unsigned* sel, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned s = sel[i] & 3u;
    int r;
    asm("{\n\t"
        "ts: .branchtargets J0, J1, J2, J3;\n\t"
        "brx.idx %1, ts;\n"
        "J0:\n\t"
        "mov.s32 %0, 100;\n\t"
        "bra.uni JEND;\n"
        "J1:\n\t"
        "mov.s32 %0, 201;\n\t"
        "bra.uni JEND;\n"
        "J2:\n\t"
        "mov.s32 %0, 302;\n\t"
        "bra.uni JEND;\n"
        "J3:\n\t"
        "mov.s32 %0, 403;\n"
        "JEND:\n\t"
        "}"
        : "=r"(r)
        : "r"(s));
    out[i] = r + (int)s;
}
