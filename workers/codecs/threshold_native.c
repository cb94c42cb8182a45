/* The sparse threshold codec's hot loops in one pass each (see threshold.py for the message format and
 * native.py for how this file is built and loaded). Every function gives bit for bit what the numpy code in
 * threshold.py and varint.py gives: the same comparisons, float32 arithmetic (no fast-math), the same bytes.
 *
 * st_scan        the indices with |r_i| >= tau (NaN never), ascending; stops once `cap` (a bitmap's count)
 * st_take        for those indices: r_i -= copysign(tau, r_i), the sign flags, and the payload bytes
 * st_check       a SPARSE_COMPACT payload: exactly `count` codes, indices below n (nothing is written)
 * st_add_compact out[i] += (negative ? -c : c) for every code of a checked payload
 * st_add_local   the same from the encoder's own indices and signs
 * st_bitmap      a BITMAP message: the payload, the int8 steps, the residual
 * st_add_steps   a BITMAP from the encoder's own steps; st_add_bitmap from its payload
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the bitmap loops read and write words as little-endian bytes; numpy does the work on this machine"
#endif

#define BLOCK 64
#define LOW_BITS 0x0101010101010101ULL
#define GATHER 0x0102040810204080ULL /* bytes of 0 or 1 -> their bits, byte j to bit j, in the top byte */

/* The indices with |r_i| >= tau (NaN never), ascending, into `idx`, which has room for cap + BLOCK entries.
 * Returns the count when it is below cap, else cap (the caller then sends a bitmap). With SSE2 (every x86-64) 16
 * comparisons make a 16-bit mask and only its set bits are visited: one pass at memory speed, whatever the density. */
int64_t st_scan(const float *r, int64_t n, float tau, int32_t *idx, int64_t cap) {
    int64_t count = 0, b = 0;
#if defined(__SSE2__)
    const __m128 t = _mm_set1_ps(tau);
    const __m128 magnitude = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
    for (; b + 16 <= n; b += 16) {
        int mask = 0;
        for (int q = 0; q < 4; q++) { /* |r| >= tau, ordered: false for NaN, as numpy's r >= tau or r <= -tau */
            __m128 v = _mm_and_ps(_mm_loadu_ps(r + b + 4 * q), magnitude);
            mask |= _mm_movemask_ps(_mm_cmpge_ps(v, t)) << (4 * q);
        }
        while (mask) {
            idx[count++] = (int32_t)(b + __builtin_ctz((unsigned)mask));
            mask &= mask - 1;
        }
        if (count >= cap) return cap;
    }
#endif
    for (; b < n; b++) {
        if (fabsf(r[b]) >= tau) { /* for tau > 0 exactly r >= tau or r <= -tau */
            idx[count++] = (int32_t)b;
            if (count >= cap) return cap;
        }
    }
    return count;
}

/* kind 2: SPARSE_COMPACT (gap/sign LEB128), kind 0: SPARSE_INT32. Returns the payload's length in bytes. */
int64_t st_take(float *r, const int32_t *idx, int64_t count, float tau, int kind, uint8_t *negative,
                uint8_t *out) {
    int64_t previous = -1, at = 0;
    for (int64_t k = 0; k < count; k++) {
        int64_t i = idx[k];
        float v = r[i];
        uint8_t neg = v < 0;
        r[i] = v - copysignf(tau, v);
        negative[k] = neg;
        if (kind == 2) {
            uint64_t value = ((uint64_t)(i - previous - 1) << 1) | neg;
            while (value >= 0x80) {
                out[at++] = (uint8_t)(value | 0x80);
                value >>= 7;
            }
            out[at++] = (uint8_t)value;
        } else {
            int32_t signed_index = neg ? -(int32_t)(i + 1) : (int32_t)(i + 1);
            uint32_t u = (uint32_t)signed_index;
            out[at++] = (uint8_t)u;
            out[at++] = (uint8_t)(u >> 8);
            out[at++] = (uint8_t)(u >> 16);
            out[at++] = (uint8_t)(u >> 24);
        }
        previous = i;
    }
    return at;
}

/* 0 when `data` holds exactly `count` codes of at most 5 bytes whose indices stay below n; else -1 (the numpy
 * decoder then says what is wrong). Five bytes hold any gap of an index below 2**31 - 1. */
int st_check(const uint8_t *data, int64_t size, int64_t count, int64_t n) {
    int64_t at = 0, position = -1;
    for (int64_t k = 0; k < count; k++) {
        uint64_t value = 0;
        int shift = 0;
        for (;;) {
            if (at >= size || shift > 28) return -1;
            uint8_t byte = data[at++];
            value |= (uint64_t)(byte & 0x7F) << shift;
            shift += 7;
            if (byte < 0x80) break;
        }
        position += (int64_t)(value >> 1) + 1;
        if (position >= n) return -1;
    }
    return at == size ? 0 : -1;
}

void st_add_compact(float *out, const uint8_t *data, int64_t count, float c) {
    int64_t at = 0, position = -1;
    for (int64_t k = 0; k < count; k++) {
        uint64_t value = 0;
        int shift = 0;
        uint8_t byte;
        do {
            byte = data[at++];
            value |= (uint64_t)(byte & 0x7F) << shift;
            shift += 7;
        } while (byte >= 0x80);
        position += (int64_t)(value >> 1) + 1;
        out[position] += (value & 1) ? -c : c;
    }
}

void st_add_local(float *out, const int64_t *idx, const uint8_t *negative, int64_t count, float c) {
    for (int64_t k = 0; k < count; k++) out[idx[k]] += negative[k] ? -c : c;
}

/* BITMAP (st_scan found at least a bitmap's count; returns the count): per 16 elements one little-endian uint32 word, sent bits in
 * 0..15 and negative bits in 16..31; steps[i] = +1, -1 or 0 (what bitmap.subtract_steps is given) and
 * r_i -= steps[i] * tau (exact products: bit for bit torch's sub_ with alpha). */
int64_t st_bitmap(float *r, int64_t n, float tau, uint8_t *payload, int8_t *steps) {
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) { /* one vectorized pass: the steps, the residual, the count */
        float v = r[i];
        int s = (v >= tau) - (v <= -tau);
        steps[i] = (int8_t)s;
        r[i] = v - (float)s * tau;
        count += s != 0;
    }
    int64_t words = (n + 15) / 16, full = n / 16;
    for (int64_t w = 0; w < words; w++) { /* then the bits, 8 steps at a time: 0x01 and 0xFF are sent, 0xFF negative */
        uint8_t *word = payload + 4 * w;
        for (int half = 0; half < 2; half++) {
            int64_t base = 16 * w + 8 * half;
            uint64_t x = 0;
            if (w < full) {
                memcpy(&x, steps + base, 8);
            } else {
                for (int64_t j = base; j < n && j < base + 8; j++) x |= (uint64_t)(uint8_t)steps[j] << (8 * (j - base));
            }
            word[half] = (uint8_t)(((x & LOW_BITS) * GATHER) >> 56);
            word[2 + half] = (uint8_t)((((x >> 7) & LOW_BITS) * GATHER) >> 56);
        }
    }
    return count;
}

/* out_i -= k_i * magnitude with k = -steps (a coefficient >= 0) or steps (below 0): bitmap.add_steps. */
void st_add_steps(float *out, const int8_t *steps, int64_t n, float magnitude, int coefficient_negative) {
    int sign = coefficient_negative ? 1 : -1; /* an integer k: k = 0 is +0.0, which leaves -0.0 as it is */
    for (int64_t i = 0; i < n; i++) out[i] = out[i] - (float)(sign * steps[i]) * magnitude;
}

/* out_i -= k_i * magnitude with k = 2 * negative - sent (a coefficient >= 0) or sent - 2 * negative: the
 * payload as bitmap.add_numpy adds it. */
static uint64_t spread(uint32_t bits) { /* 8 bits -> 8 bytes of 0 or 1, bit j to byte j */
    uint64_t x = ((uint64_t)(bits & 0xFF) * LOW_BITS) & 0x8040201008040201ULL;
    return ((x + 0x7F7F7F7F7F7F7F7FULL) >> 7) & LOW_BITS;
}

void st_add_bitmap(float *out, int64_t n, const uint8_t *payload, float magnitude, int coefficient_negative) {
    int sign = coefficient_negative ? -1 : 1;
    int8_t k[4096]; /* a chunk's k (+1 sent negative, -1 sent positive, 0), then one vectorized pass */
    for (int64_t start = 0; start < n; start += 4096) {
        int64_t stop = start + 4096 < n ? start + 4096 : n;
        for (int64_t w = start / 16; 16 * w < stop; w++) {
            const uint8_t *word = payload + 4 * w;
            for (int half = 0; half < 2; half++) {
                uint64_t sent = spread(word[half]), neg = spread(word[2 + half]);
                uint64_t minus = sent & ~neg;
                uint64_t bytes = neg | ((minus << 8) - minus); /* 0x01 or 0xFF per byte, no borrow between bytes */
                memcpy(k + 16 * w - start + 8 * half, &bytes, 8);
            }
        }
        for (int64_t i = start; i < stop; i++) out[i] = out[i] - (float)(sign * k[i - start]) * magnitude;
    }
}
