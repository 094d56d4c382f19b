// Structs passed to kernels by value, and arrays of structs in global memory.

struct Params {
    float scale;        // offset 0
    int offset;         // 4
    double bias;        // 8
    char flag;          // 16
    short tag;          // 18
    unsigned long long mask;  // 24
    float coeffs[3];    // 32
};                      // size 48 (44 rounded up to the 8-byte alignment)

extern "C" __global__ void struct_by_value(double* out, const float* in, Params p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = in[i];
    double r = (double)(p.scale * x + p.coeffs[i % 3]) + p.bias + (double)(p.offset + p.tag);
    if (p.flag) r = -r;
    out[i] = r + (double)((p.mask >> (i & 63)) & 1ULL);
}

struct Particle {
    float x, y, z;
    float vx, vy, vz;
    int alive;
};  // 28 bytes, align 4

struct Step {
    float dt;
    float gravity;
};

extern "C" __global__ void particles_step(Particle* ps, Step s, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Particle p = ps[i];
    if (p.alive) {
        p.vy -= s.gravity * s.dt;
        p.x += p.vx * s.dt;
        p.y += p.vy * s.dt;
        p.z += p.vz * s.dt;
        if (p.y < 0.0f) p.alive = 0;
    }
    ps[i] = p;
}

// A vector type parameter and float4/int2 loads.
extern "C" __global__ void vector_types(float4* out, const float4* in, int2 shift, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float4 v = in[i];
    float4 r;
    r.x = v.y + (float)shift.x;
    r.y = v.z * 2.0f;
    r.z = v.w - (float)shift.y;
    r.w = v.x;
    out[i] = r;
}
