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
 * st_add_bitmaps several BITMAPs (steps or payloads) in one pass over out, each element as the two above give it
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
#if defined(__SSE2__)
/* Bit j set when |r[j]| >= tau, for the 16 elements at r; ordered: false for NaN, as numpy's r >= tau or r <= -tau */
static inline int mask16(const float *r, __m128 t, __m128 magnitude) {
    int mask = 0;
    for (int q = 0; q < 4; q++) {
        __m128 v = _mm_and_ps(_mm_loadu_ps(r + 4 * q), magnitude);
        mask |= _mm_movemask_ps(_mm_cmpge_ps(v, t)) << (4 * q);
    }
    return mask;
}

/* Whether at least `cap` elements pass, found without visiting them one by one: a sample of every 64th block of 16
 * first (1/64 of the buffer), and only when it extrapolates to a bitmap's count a counting pass that stops at cap.
 * A bitmap step then skips the index scan, which would visit about n/16 bits before giving up. */
static int reaches_cap(const float *r, int64_t n, __m128 t, __m128 magnitude, int64_t cap) {
    const int64_t stride = 1024;
    if (n < 16 * stride) return 0;
    int64_t sampled = 0;
    for (int64_t b = 0; b + 16 <= n; b += stride) sampled += __builtin_popcount((unsigned)mask16(r + b, t, magnitude));
    if (sampled * (stride / 16) < cap) return 0; /* the sample extrapolated to the whole buffer */
    int64_t count = 0;
    for (int64_t b = 0; b + 16 <= n; b += 16) {
        count += __builtin_popcount((unsigned)mask16(r + b, t, magnitude));
        if (count >= cap) return 1;
    }
    return 0; /* the sample misled (rare): the index scan decides, as it always could */
}
#endif

int64_t st_scan(const float *r, int64_t n, float tau, int32_t *idx, int64_t cap) {
    int64_t count = 0, b = 0;
#if defined(__SSE2__)
    const __m128 t = _mm_set1_ps(tau);
    const __m128 magnitude = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
    if (reaches_cap(r, n, t, magnitude, cap)) return cap;
    for (; b + 16 <= n; b += 16) {
        int mask = mask16(r + b, t, magnitude);
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
    int64_t count = 0, b = 0;
#if defined(__SSE2__)
    /* 16 elements at a time, one pass: the comparisons' masks are the word's bits, the steps and the residual come
     * from the same masks. s = 1.0 - 0.0, 0.0 - 1.0 or 0.0 - 0.0 = +0.0 and r - s * tau: the scalar loop's floats. */
    const __m128 t = _mm_set1_ps(tau), minus_t = _mm_set1_ps(-tau), one = _mm_set1_ps(1.0f);
    for (; b + 16 <= n; b += 16) {
        int positive = 0, negative = 0;
        __m128i s32[4];
        for (int q = 0; q < 4; q++) {
            __m128 v = _mm_loadu_ps(r + b + 4 * q);
            __m128 p = _mm_cmpge_ps(v, t), m = _mm_cmple_ps(v, minus_t); /* NaN: neither */
            positive |= _mm_movemask_ps(p) << (4 * q);
            negative |= _mm_movemask_ps(m) << (4 * q);
            __m128 s = _mm_sub_ps(_mm_and_ps(p, one), _mm_and_ps(m, one));
            _mm_storeu_ps(r + b + 4 * q, _mm_sub_ps(v, _mm_mul_ps(s, t)));
            s32[q] = _mm_cvttps_epi32(s);
        }
        __m128i bytes = _mm_packs_epi16(_mm_packs_epi32(s32[0], s32[1]), _mm_packs_epi32(s32[2], s32[3]));
        _mm_storeu_si128((__m128i *)(steps + b), bytes);
        uint32_t sent = (uint32_t)(positive | negative), word = sent | (uint32_t)negative << 16;
        memcpy(payload + 4 * (b / 16), &word, 4); /* little-endian (checked above) */
        count += __builtin_popcount(sent);
    }
#endif
    for (int64_t i = b; i < n; i++) { /* the rest (all of it without SSE2): the steps, the residual, the count */
        float v = r[i];
        int s = (v >= tau) - (v <= -tau);
        steps[i] = (int8_t)s;
        r[i] = v - (float)s * tau;
        count += s != 0;
    }
    int64_t words = (n + 15) / 16, full = n / 16;
    for (int64_t w = b / 16; w < words; w++) { /* their bits, 8 steps at a time: 0x01 and 0xFF are sent, 0xFF negative */
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

void st_add_bitmaps(float *out, int64_t n, int64_t k, const void *const *sources, const int *is_steps,
                    const float *magnitudes, const int *coefficient_negative, int sum_first);

void st_add_bitmap(float *out, int64_t n, const uint8_t *payload, float magnitude, int coefficient_negative) {
    int sign = coefficient_negative ? -1 : 1;
    int64_t begin = 0;
#if defined(__SSE2__)
    /* the whole words 16 lanes at a time: the fused loop below with this one message (the same floats) */
    const void *source = payload;
    const int not_steps = 0;
    begin = 16 * (n / 16);
    st_add_bitmaps(out, begin, 1, &source, &not_steps, &magnitude, &coefficient_negative, 0);
#endif
    int8_t k[4096]; /* a chunk's k (+1 sent negative, -1 sent positive, 0), then one vectorized pass */
    for (int64_t start = begin; start < n; start += 4096) {
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

/* Several BITMAP messages added in one pass over `out`, in message order per element: message j is the encoder's
 * own steps (is_steps[j]: int8 steps, as st_add_steps) or a payload (as st_add_bitmap), with its magnitude and
 * coefficient sign. Each message's term per element is what the one-message functions subtract from it. Without
 * sum_first every element receives exactly their operations, in the same order (bit for bit theirs, one pass
 * instead of k); with sum_first the terms are summed from +0.0 in message order and out -= the sum: one rounding
 * per element, bit for bit what decoding the messages into a zeroed buffer with the opposite scale and subtracting
 * that buffer gives. */
#define MAX_FUSED 16
void st_add_bitmaps(float *out, int64_t n, int64_t k, const void *const *sources, const int *is_steps,
                    const float *magnitudes, const int *coefficient_negative, int sum_first) {
    int64_t begin = 0;
    if (k > MAX_FUSED) { /* more than the fused loop holds (the caller splits sum_first runs to fit) */
        for (int64_t j = 0; j < k; j++) {
            if (is_steps[j]) st_add_steps(out, (const int8_t *)sources[j], n, magnitudes[j], coefficient_negative[j]);
            else st_add_bitmap(out, n, (const uint8_t *)sources[j], magnitudes[j], coefficient_negative[j]);
        }
        return;
    }
#if defined(__SSE2__)
    __m128 c[MAX_FUSED], magnitude[MAX_FUSED];
    int negate_steps[MAX_FUSED];
    const __m128 sign_bit = _mm_set1_ps(-0.0f);
    const __m128i zero = _mm_setzero_si128();
    __m128i lane_bits[4];
    for (int q = 0; q < 4; q++) lane_bits[q] = _mm_set_epi32(8 << (4 * q), 4 << (4 * q), 2 << (4 * q), 1 << (4 * q));
    for (int64_t j = 0; j < k; j++) {
        c[j] = _mm_set1_ps((coefficient_negative[j] ? -1.0f : 1.0f) * magnitudes[j]); /* payloads: as st_add_bitmap */
        magnitude[j] = _mm_set1_ps(magnitudes[j]);
        negate_steps[j] = !coefficient_negative[j]; /* steps: out -= (float)(sign * s) * magnitude, sign = neg ? 1 : -1 */
    }
    int64_t full = n / 16;
    for (int64_t w = 0; w < full; w++) {
        __m128 o[4], acc[4];
        for (int q = 0; q < 4; q++) {
            o[q] = _mm_loadu_ps(out + 16 * w + 4 * q);
            acc[q] = _mm_setzero_ps();
        }
        for (int64_t j = 0; j < k; j++) {
            if (is_steps[j]) {
                __m128i s8 = _mm_loadu_si128((const __m128i *)((const int8_t *)sources[j] + 16 * w));
                __m128i lo16 = _mm_srai_epi16(_mm_unpacklo_epi8(s8, s8), 8), hi16 = _mm_srai_epi16(_mm_unpackhi_epi8(s8, s8), 8);
                __m128i s32[4] = {_mm_srai_epi32(_mm_unpacklo_epi16(lo16, lo16), 16),
                                  _mm_srai_epi32(_mm_unpackhi_epi16(lo16, lo16), 16),
                                  _mm_srai_epi32(_mm_unpacklo_epi16(hi16, hi16), 16),
                                  _mm_srai_epi32(_mm_unpackhi_epi16(hi16, hi16), 16)};
                for (int q = 0; q < 4; q++) { /* the integer product first: 0 stays +0.0, never -0.0 */
                    __m128i k32 = negate_steps[j] ? _mm_sub_epi32(zero, s32[q]) : s32[q];
                    __m128 term = _mm_mul_ps(_mm_cvtepi32_ps(k32), magnitude[j]);
                    if (sum_first) acc[q] = _mm_add_ps(acc[q], term);
                    else o[q] = _mm_sub_ps(o[q], term);
                }
            } else {
                uint32_t word;
                memcpy(&word, (const uint8_t *)sources[j] + 4 * w, 4);
                __m128i sent = _mm_set1_epi32((int)(word & 0xFFFF)), negative = _mm_set1_epi32((int)(word >> 16));
                for (int q = 0; q < 4; q++) {
                    __m128 s = _mm_castsi128_ps(_mm_cmpeq_epi32(_mm_and_si128(sent, lane_bits[q]), lane_bits[q]));
                    __m128 m = _mm_castsi128_ps(_mm_cmpeq_epi32(_mm_and_si128(negative, lane_bits[q]), lane_bits[q]));
                    __m128 term = _mm_and_ps(s, _mm_xor_ps(c[j], _mm_andnot_ps(m, sign_bit)));
                    if (sum_first) acc[q] = _mm_add_ps(acc[q], term);
                    else o[q] = _mm_sub_ps(o[q], term);
                }
            }
        }
        for (int q = 0; q < 4; q++) _mm_storeu_ps(out + 16 * w + 4 * q, sum_first ? _mm_sub_ps(o[q], acc[q]) : o[q]);
    }
    begin = 16 * full;
#endif
    if (begin < n && sum_first) { /* the tail (everything without SSE2): the terms' sum per element, then out -= it */
        for (int64_t i = begin; i < n; i++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < k; j++) {
                int kk;
                if (is_steps[j]) {
                    kk = (coefficient_negative[j] ? 1 : -1) * ((const int8_t *)sources[j])[i];
                } else {
                    uint32_t word;
                    memcpy(&word, (const uint8_t *)sources[j] + 4 * (i / 16), 4);
                    int bit = (int)(i % 16), sent = (word >> bit) & 1, neg = (word >> (16 + bit)) & 1;
                    kk = (coefficient_negative[j] ? -1 : 1) * (sent ? (neg ? 1 : -1) : 0);
                }
                acc = acc + (float)kk * magnitudes[j];
            }
            out[i] = out[i] - acc;
        }
    } else if (begin < n) { /* the tail (everything without SSE2): each message by its one-message function */
        for (int64_t j = 0; j < k; j++) {
            if (is_steps[j]) {
                st_add_steps(out + begin, (const int8_t *)sources[j] + begin, n - begin, magnitudes[j],
                             coefficient_negative[j]);
            } else { /* begin is a whole number of words: the payload's words from there on */
                st_add_bitmap(out + begin, n - begin, (const uint8_t *)sources[j] + 4 * (begin / 16), magnitudes[j],
                              coefficient_negative[j]);
            }
        }
    }
}
