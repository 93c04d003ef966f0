/*
 * pipeline/image/huff.c - the Huffman (entropy) decoder of the planar path: a
 * baseline JPEG's coefficients, put in place of libjpeg's own decode_mcu.
 *
 * Why write what libjpeg-turbo already does: after decode_yuv.c's crop
 * window, DCT scaling and the stop after the crop's last row, entropy
 * decoding is three quarters of the pipeline's CPU time (perf, issue 17:
 * 74% of `sluice profile` on the ImageNet-like corpus, the IDCT 6%), and
 * every MCU before the crop's last row must still be entropy decoded,
 * also those above the crop and left or right of it, whose coefficients
 * nobody uses. libjpeg-turbo 2.1's decode_mcu_fast looks 8 bits ahead,
 * then reads the magnitude bits apart, and decodes the unused MCUs as
 * fully as the used ones. Here:
 *   - a 10-bit table resolves a whole AC coefficient (code, run and the
 *     magnitude bits, sign-extended) in one lookup when code + magnitude
 *     fit in 10 bits, a ZRL as a zero coefficient 16 places on, and EOB;
 *     for the blocks that are stored a second table (pair, 64-bit
 *     entries) gives that coefficient together with the next symbol's
 *     (a coefficient or EOB) where both fit in the 10 bits, and both
 *     forms go through the same branch-free step (two stores, the second
 *     overwritten by the first where there is one): the chain of shift,
 *     lookup, shift that bounds a Huffman decoder runs once per two
 *     coefficients where they are small (issue 41: a sample from a file
 *     with restart markers 2-4% faster, one thread, perf/bench_restart
 *     side by side on a shared machine; a first try with 32-bit entries
 *     and a branch between one and two was 8% slower: mispredictions);
 *   - MCUs outside the crop's columns (decompress_onepass IDCTs only
 *     [first_iMCU_col, last_iMCU_col] of jpeg_decomp_master, the fields
 *     decode_yuv.c sets) and above the crop (empty range) go through a
 *     second table (skip2) that gives code + magnitude length and run of
 *     every symbol whose code fits in 10 bits, and of a second symbol
 *     where its code fits in the bits the first leaves: nothing is
 *     stored, only the DC predictions kept;
 *   - the bit buffer is refilled 8 bytes at a time when none of them is
 *     0xFF (a stuffed byte or a marker), one byte at a time otherwise.
 * The coefficients it stores are libjpeg's for every stream libjpeg
 * decodes without a warning (tests/pipeline/test_huff.c compares the
 * planes byte for byte with SLUICE_HUFF=libjpeg, which keeps libjpeg's
 * decoder). Damage: a code no table has (libjpeg-turbo's fast path
 * silently makes it symbol 0) is JWRN_HUFF_BAD_CODE here; using bits past
 * a marker or the end of the data is JWRN_HIT_MARKER, as libjpeg; both
 * are errors under decode.c's error manager. A run past coefficient 63
 * lands on 63, as libjpeg's jpeg_natural_order does.
 *
 * Fill bytes (issue 26): FF FF .. 00 in the scan is read here as one FF
 * data byte, as libjpeg-turbo's slow path (jpeg_fill_bit_buffer) reads
 * it. Its fast path (decode_mcu_fast) takes the second FF for a marker,
 * decodes the MCU on zero bits, then gives the MCU up and decodes it again
 * on the slow path, which does not clear the coefficients the first pass
 * wrote: the pixels differ from the stream without the fill byte at more
 * than half the places it can stand (55-63% of the places,
 * up to 237 levels: perf/jpeg_fill_bytes, perf/RESULTS.md),
 * and depend on where the bytes lie in libjpeg's buffer. T.81 allows fill
 * bytes only before a marker, which FF 00 is not; so such a stream is
 * refused by sl_jpeg_scan (records/jpeg_scan.c) before either decoder
 * runs, and both decoders give the same batch: none. Fill bytes before a
 * real marker are read the same way by both (the scan ends there).
 *
 * Where: only for what it was written for; otherwise libjpeg's decoder
 * stays: sequential Huffman, 8-bit, one scan with every component
 * (baseline and extended sequential files), a memory source. Progressive,
 * arithmetic and multi-scan files keep libjpeg's (SL_ENOTSUP). Files with
 * restart markers (issue 41: sluice convert --restart writes them) go
 * through sl_huff_seek, which reads only the restart intervals the crop
 * needs ("restart intervals" below), with this decoder or around
 * libjpeg's.
 *
 * How it is put in: jpeglib.h's jpeg_entropy_decoder (jpegint.h) is a
 * struct of function pointers that libjpeg fills in jpeg_start_decompress
 * (jinit_huff_decoder, then start_pass for the first scan); the
 * coefficient controller calls decode_mcu once per MCU with the MCU's
 * blocks zeroed. sl_huff_install, called after jpeg_start_decompress and
 * before the first jpeg_read_raw_data, points decode_mcu here and
 * cinfo->client_data at this file's state; jpeg_abort_decompress frees
 * libjpeg's entropy object, so the next image starts from libjpeg's again.
 * The source's next_input_byte follows the data consumed, so libjpeg finds
 * the marker after the scan where it expects it.
 *
 * Threading: one state per decoder (per thread).
 */
#include <stdint.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>
#include <jpegint.h> /* jpeg_entropy_decoder, jpeg_decomp_master */

#include "pipeline/image/huff_int.h"
#include "pipeline/image/image.h"

struct sl_huff {
    sl_htab dc[NUM_HUFF_TBLS], ac[NUM_HUFF_TBLS];
    /* the scan */
    const uint8_t *p, *end;
    uint64_t acc;         /* bits, MSB first; the top nbits are valid */
    int nbits;
    int marker;           /* a marker (or the data's end) was reached */
    int fake;             /* zero bits appended since (see refill_slow) */
    int dc_pred[MAX_COMPS_IN_SCAN];
    JDIMENSION col;       /* MCU column of the next decode_mcu */
    int nblk;
    const sl_htab *bdc[D_MAX_BLOCKS_IN_MCU], *bac[D_MAX_BLOCKS_IN_MCU];
    int bcomp[D_MAX_BLOCKS_IN_MCU], bstore[D_MAX_BLOCKS_IN_MCU];
    /* restart intervals (sl_huff_seek, decode_mcu_seek) */
    unsigned ri;              /* MCUs per interval */
    const uint8_t *base;      /* the stream; interval k starts at base + off[k] */
    const uint32_t *off;
    size_t noff, len;
    JDIMENSION mpr, row, rcol; /* MCUs per row; row and column of the next call */
    JDIMENSION r0, r1, c0, c1; /* needed: MCU rows [r0, r1), columns [c0, c1] */
    uint64_t seg;             /* not reading: the MCU where reading starts again */
    int reading;              /* the reader stands at the next call's MCU */
    unsigned togo, next_rst;  /* MCUs left in the interval; the marker after it */
    boolean (*lj)(j_decompress_ptr, JBLOCKROW *); /* libjpeg's decode_mcu, or NULL: ours */
};

/* Zigzag to natural order, 16 more entries for corrupt runs past 63. */
static const uint8_t natural[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33,
    40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36,
    29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54,
    47, 55, 62, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};
/* natural shifted by one (natural1[i] = natural[i - 1]): pair entries
 * index it with k + a, the place after the value's. */
static const uint8_t natural1[64 + 1] = {
    0,  0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40,
    48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15,
    23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

/* ---------------------------------------------------------- bit reader */

/* The bit reader's hot state, a local of decode_mcu (so it lives in
 * registers; the slow paths take and return it by value). */
typedef struct sl_bits {
    uint64_t acc;         /* bits, MSB first; the top nbits are valid */
    int nbits;
    const uint8_t *p;     /* next byte */
} sl_bits;

/* Refill one byte at a time (a 0xFF is near): stuffed FF 00 is a data
 * 0xFF (fill bytes FF FF .. 00 too, as libjpeg's jpeg_fill_bit_buffer);
 * any other marker, or the data's end, ends the data: p stays on its
 * first 0xFF, and zero bits follow from then on, counted in h->fake (the
 * real bits are exhausted once nbits < fake). */
static __attribute__((noinline)) sl_bits refill_slow(sl_huff *h, sl_bits b)
{
    if (!h->marker) {
        while (b.nbits <= 56) {
            if (b.p >= h->end) {
                h->marker = 1;
                break;
            }
            uint32_t c = *b.p;
            const uint8_t *q = b.p + 1;
            if (c == 0xFF) {
                while (q < h->end && *q == 0xFF)
                    q++;
                if (q >= h->end || *q != 0) {
                    h->marker = 1;
                    break;
                }
                q++;
            }
            b.p = q;
            b.acc |= (uint64_t)c << (56 - b.nbits);
            b.nbits += 8;
        }
        if (!h->marker)
            return b;
        /* the word refill may have left partial-byte bits below nbits */
        b.acc &= b.nbits ? ~0ull << (64 - b.nbits) : 0;
    }
    h->fake += 64 - b.nbits;
    b.nbits = 64;
    return b;
}

/* With nbits < 32: at least 56 bits in the buffer after (enough for a
 * 16-bit code and its 15 magnitude bits). Eight bytes at once when none
 * is 0xFF; after a marker p stays on its 0xFF, so that takes the slow
 * path too. */
static inline void refill(sl_huff *h, sl_bits *b)
{
    if (h->end - b->p >= 8) {
        uint64_t w;
        memcpy(&w, b->p, 8);
        uint64_t x = ~w; /* a byte 0xFF is a zero byte of ~w */
        if (((x - 0x0101010101010101ull) & ~x & 0x8080808080808080ull) == 0) {
            b->acc |= __builtin_bswap64(w) >> b->nbits;
            b->p += (63 - b->nbits) >> 3;
            b->nbits |= 56;
            return;
        }
    }
    *b = refill_slow(h, *b);
}

/* A code longer than HB bits (canonical search, Figure F.16): (length <<
 * 8) | symbol. A code no table holds: JWRN_HUFF_BAD_CODE (an error under
 * decode.c's manager) and, if that returns, symbol 0 over 16 bits. */
static __attribute__((noinline)) int decode_long(j_decompress_ptr ci, const sl_htab *t,
                                                 uint64_t acc)
{
    for (int l = HB + 1; l <= 16; l++) {
        int32_t code = (int32_t)(acc >> (64 - l));
        if (code <= t->maxcode[l])
            return l << 8 | t->vals[(code + t->valoff[l]) & 0xFF];
    }
    WARNMS(ci, JWRN_HUFF_BAD_CODE);
    return 16 << 8;
}

/* ------------------------------------------------------------- decoding */

#define PEEK(b) ((uint32_t)((b)->acc >> (64 - HB)))
#define DROP(b, n)                                                                         \
    do {                                                                                   \
        (b)->acc <<= (n);                                                                  \
        (b)->nbits -= (n);                                                                 \
    } while (0)
#define INLINE static inline __attribute__((always_inline))

/* One symbol of table t (the buffer holds >= 31 bits). */
INLINE int symbol(j_decompress_ptr ci, sl_bits *b, const sl_htab *t)
{
    int e = t->look[PEEK(b)];
    if (!e)
        e = decode_long(ci, t, b->acc);
    DROP(b, e >> 8);
    return e & 0xFF;
}

/* s > 0 magnitude bits, sign-extended. */
INLINE int magnitude(sl_bits *b, int s)
{
    uint32_t v = (uint32_t)(b->acc >> (64 - s));
    DROP(b, s);
    return extend(v, s);
}

/* The DC difference into the component's prediction; the new DC. */
INLINE int dc(j_decompress_ptr ci, sl_huff *h, sl_bits *b, int blk)
{
    if (b->nbits < 32)
        refill(h, b);
    int s = symbol(ci, b, h->bdc[blk]), d = 0;
    if (s)
        d = magnitude(b, s);
    int *pred = &h->dc_pred[h->bcomp[blk]];
    /* unsigned: damaged files repeat +-2047 until an int would overflow */
    *pred = (int)((unsigned)*pred + (unsigned)d);
    return *pred;
}

INLINE void block_store(j_decompress_ptr ci, sl_huff *h, sl_bits *b, int blk, JCOEF *out)
{
    const sl_htab *t = h->bac[blk];
    out[0] = (JCOEF)dc(ci, h, b, blk);
    /* k: the index of the next coefficient. A pair entry where every
     * value it writes lands in the block (a first at 63 ends the block:
     * what follows is the next block's); otherwise one symbol as fast
     * and the canonical search have it. The same values at the same
     * places as one symbol at a time (natural1[i] is natural[i - 1]). */
    for (unsigned k = 1;;) {
        if (b->nbits < 32)
            refill(h, b);
        uint32_t pk = PEEK(b);
        uint64_t e = t->pair[pk];
        if (__builtin_expect(k + (unsigned)(e >> 16 & 255) <= 64, 1)) {
            DROP(b, (int)(e & 63));
            out[natural1[k + (unsigned)(e >> 16 & 255)]] = (JCOEF)(e >> 48);
            out[natural1[k + (unsigned)(e >> 8 & 255)]] = (JCOEF)(e >> 32);
            k += (unsigned)(e >> 24 & 255);
            if (k >= 64)
                break;
            continue;
        }
        uint32_t f = t->fast[pk];
        if (f) {
            DROP(b, (int)(f & 0xFF));
            if (f & E_EOB)
                break;
            k += f >> 8 & 15;
            out[natural[k]] = (JCOEF)((int32_t)f >> 16);
        } else {
            int sym = symbol(ci, b, t), r = sym >> 4, s = sym & 15;
            if (s) {
                k += (unsigned)r;
                out[natural[k]] = (JCOEF)magnitude(b, s);
            } else if (r != 15) {
                break;
            } else {
                k += 15;
            }
        }
        if (++k >= 64)
            break;
    }
}

/* The DC; the AC coefficients only read past, two symbols a lookup where
 * they fit (skip2). */
INLINE int block_skip(j_decompress_ptr ci, sl_huff *h, sl_bits *b, int blk)
{
    const sl_htab *t = h->bac[blk];
    int v = dc(ci, h, b, blk);
    for (int k = 1; k < 64;) {
        if (b->nbits < 32)
            refill(h, b);
        uint32_t e = t->skip2[PEEK(b)];
        if (e) {
            int a1 = (int)(e >> 10 & 127);
            if (e & S_EOB1) {
                DROP(b, (int)(e & 31));
                break;
            }
            if (!(e & S_TWO) || k + a1 >= 64) { /* the block may end after the first */
                DROP(b, (int)(e & 31));
                k += a1;
                continue;
            }
            DROP(b, (int)(e >> 5 & 31));
            if (e & S_EOB2)
                break;
            k += (int)(e >> 17 & 127);
            continue;
        }
        int sym = symbol(ci, b, t), r = sym >> 4, s = sym & 15;
        if (s) {
            DROP(b, s);
        } else if (r != 15) {
            break;
        }
        k += r + 1;
    }
    return v;
}

/* One MCU with the bit reader at h: its blocks stored (store), or only
 * read past (the DC predictions kept). */
INLINE void read_mcu(j_decompress_ptr ci, sl_huff *h, JBLOCKROW *MCU_data, int store)
{
    sl_bits b = {h->acc, h->nbits, h->p};
    if (!store) {
        for (int k = 0; k < h->nblk; k++)
            block_skip(ci, h, &b, k);
    } else {
        for (int k = 0; k < h->nblk; k++) {
            if (h->bstore[k])
                block_store(ci, h, &b, k, MCU_data[k][0]);
            else /* IDCT at 1/8: the DC only, as libjpeg's ac_needed */
                MCU_data[k][0][0] = (JCOEF)block_skip(ci, h, &b, k);
        }
    }
    h->acc = b.acc;
    h->nbits = b.nbits;
    h->p = b.p;
    ci->src->next_input_byte = b.p;
    ci->src->bytes_in_buffer = (size_t)(h->end - b.p);
    if (h->marker && h->nbits < h->fake) {
        WARNMS(ci, JWRN_HIT_MARKER);
        ci->entropy->insufficient_data = TRUE;
    }
}

/* Does the coefficient controller IDCT this MCU column (jdcoefct.c's
 * decompress_onepass: [first_iMCU_col, last_iMCU_col], decode_yuv.c's)? */
static int stored(j_decompress_ptr ci, JBLOCKROW *MCU_data, JDIMENSION col)
{
    const struct jpeg_decomp_master *m = ci->master;
    return MCU_data && col >= m->first_iMCU_col && col <= m->last_iMCU_col;
}

/* jpeg_entropy_decoder.decode_mcu: the MCU's blocks (zeroed by the
 * caller), or only the DC predictions for an MCU the coefficient
 * controller will not IDCT. Never suspends (a memory source). */
static boolean decode_mcu(j_decompress_ptr ci, JBLOCKROW *MCU_data)
{
    sl_huff *h = ci->client_data;
    if (ci->entropy->insufficient_data) /* as libjpeg: zeros from here */
        return TRUE;
    read_mcu(ci, h, MCU_data, stored(ci, MCU_data, h->col));
    if (++h->col == ci->MCUs_per_row)
        h->col = 0;
    return TRUE;
}

/* ----------------------------------------------------- restart intervals
 *
 * With restart markers (sl_huff_seek) the reader starts at the interval
 * that holds the first MCU a row of the crop needs, instead of at the
 * scan's first byte: after a marker the DC predictions are 0 and the data
 * byte-aligned (T.81 F.2.1.3.1, F.2.2.4.2), so interval k decodes from
 * base + off[k] (records/jpeg_scan.c found where, and checked that the
 * markers are numbered in turn and one per interval) exactly as it does
 * in a decode from the start. Per needed MCU row r: read from the start
 * of the interval of MCU (r, c0) to MCU (r, c1), the MCUs before c0 only
 * read past; then either go on (the next row's first interval starts
 * at or before the next MCU) or stop and jump. MCUs nobody needs cost a
 * call that returns at once (the coefficient controller calls decode_mcu
 * for every MCU of every row it is given).
 *
 * Between intervals read in one go, the marker is checked where it must
 * be: the interval's data used up to its last byte (fewer than 8 bits,
 * the padding, left) and the next bytes RSTn with n the interval's number
 * mod 8; otherwise libjpeg's warnings (extraneous bytes; a wrong marker),
 * which sluice's decoders take as errors. libjpeg itself is not always
 * that strict about bytes left over: it warns only when it has to look
 * for the marker (jdmarker.c's next_marker), not when its bit buffer
 * already read up to it, which depends on where the bytes fall in its
 * buffer; such a damaged file is refused here and may decode with
 * SLUICE_HUFF=libjpeg (as a code no table holds, see above). An interval the crop does not
 * reach is not read, so damage inside it is not seen (as today's ROI path
 * does not see damage below the crop).
 *
 * SLUICE_HUFF=libjpeg: the same plan around libjpeg's own decode_mcu,
 * which handles the markers inside a run; a jump puts libjpeg's source at
 * off[k], clears the marker it may have read ahead, restarts its entropy
 * decoder (start_pass: bit buffer, DC predictions, restarts_to_go) and
 * sets the RST number it expects next. Both decoders read the same
 * intervals for the same crop: the same coefficients, the same planes. */

/* Our reader at p, the first byte of an interval: no bits, the DC
 * predictions 0, a whole interval to go, RST(rst) after it. */
static void reader_at(sl_huff *h, const uint8_t *p, unsigned rst)
{
    h->p = p;
    h->acc = 0;
    h->nbits = 0;
    h->marker = 0;
    h->fake = 0;
    memset(h->dc_pred, 0, sizeof h->dc_pred);
    h->togo = h->ri;
    h->next_rst = rst & 7;
}

/* The reader (ours or libjpeg's) at the start of interval k. */
static void seek_to(j_decompress_ptr ci, sl_huff *h, uint64_t k)
{
    if (k >= h->noff) { /* jpeg_scan.c's count makes this impossible */
        WARNMS(ci, JWRN_HIT_MARKER);
        return;
    }
    const uint8_t *p = h->base + h->off[k];
    if (h->lj) {
        ci->src->next_input_byte = p;
        ci->src->bytes_in_buffer = (size_t)(h->base + h->len - p);
        ci->unread_marker = 0;
        (*ci->entropy->start_pass)(ci);
        ci->marker->next_restart_num = (int)(k & 7);
    } else {
        reader_at(h, p, (unsigned)(k & 7));
    }
    h->reading = 1;
}

/* Between two intervals read in one go (ours): the data of the one
 * before used up, then its marker, then the next interval's state. */
static void next_interval(j_decompress_ptr ci, sl_huff *h)
{
    int real = h->marker ? h->nbits - h->fake : h->nbits;
    const uint8_t *q = h->p;
    while (q < h->end && *q != 0xFF) /* whole bytes the interval did not use */
        q++;
    if (real >= 8 || q != h->p) {
        WARNMS2(ci, JWRN_EXTRANEOUS_DATA, (int)(q - h->p) + (real > 0 ? real / 8 : 0),
                q + 1 < h->end ? q[1] : 0);
        return;
    }
    while (q < h->end && *q == 0xFF) /* fill bytes */
        q++;
    int m = q < h->end ? *q : 0;
    if (m != (int)(0xD0 + h->next_rst)) {
        WARNMS2(ci, JWRN_MUST_RESYNC, m, (int)h->next_rst);
        return;
    }
    reader_at(h, q + 1, h->next_rst + 1);
}

/* After the last needed MCU of row `row`: read on, or stop until the
 * interval the next needed row starts in. */
static void plan_next(sl_huff *h, JDIMENSION row)
{
    if (row + 1 >= h->r1) {
        h->reading = 0;
        h->seg = UINT64_MAX;
        return;
    }
    uint64_t a = (uint64_t)(row + 1) * h->mpr + h->c0, s = a / h->ri * h->ri;
    if (s > (uint64_t)row * h->mpr + h->c1 + 1) {
        h->reading = 0;
        h->seg = s;
    }
}

/* decode_mcu for files with restart markers (both decoders). */
static boolean decode_mcu_seek(j_decompress_ptr ci, JBLOCKROW *MCU_data)
{
    sl_huff *h = ci->client_data;
    JDIMENSION row = h->row, col = h->rcol;
    if (++h->rcol == h->mpr) {
        h->rcol = 0;
        h->row++;
    }
    if (!h->reading) {
        if ((uint64_t)row * h->mpr + col != h->seg)
            return TRUE; /* not needed: zeros, never IDCT'd */
        seek_to(ci, h, h->seg / h->ri);
    } else if (!h->lj && h->togo == 0) {
        next_interval(ci, h);
    }
    if (h->lj) {
        if (!h->lj(ci, MCU_data))
            return FALSE;
    } else {
        h->togo--;
        if (!ci->entropy->insufficient_data)
            read_mcu(ci, h, MCU_data, stored(ci, MCU_data, col));
    }
    if (row >= h->r0 && row < h->r1 && col == h->c1)
        plan_next(h, row);
    return TRUE;
}

/* --------------------------------------------------------------- API */

/* What huff.c decodes: sequential Huffman, 8-bit, one scan of every
 * component, a memory source. */
static int supported(const struct jpeg_decompress_struct *ci)
{
    return !(ci->progressive_mode || ci->arith_code || ci->data_precision != 8 ||
             ci->comps_in_scan != ci->num_components || ci->Ss != 0 ||
             ci->Se != DCTSIZE2 - 1 || ci->Ah || ci->Al ||
             ci->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU || ci->blocks_in_MCU < 1 || !ci->entropy ||
             !ci->src || ci->unread_marker || !ci->src->next_input_byte ||
             ci->comps_in_scan > MAX_COMPS_IN_SCAN);
}

/* The state, allocated on first use, with the scan's tables. */
static int prepare(struct jpeg_decompress_struct *ci, sl_huff **hp)
{
    sl_huff *h = *hp;
    if (!h) {
        if (!(h = calloc(1, sizeof *h)))
            return sl_fail(SL_ENOMEM, "sl_huff_install: out of memory");
        *hp = h;
    }
    unsigned built = 0; /* bit dt: dc[dt] built for this image; 4 + at: ac[at] */
    for (int b = 0; b < ci->blocks_in_MCU; b++) {
        int c = ci->MCU_membership[b];
        if (c < 0 || c >= ci->comps_in_scan || !ci->cur_comp_info[c])
            return SL_ENOTSUP;
        const jpeg_component_info *cp = ci->cur_comp_info[c];
        int dt = cp->dc_tbl_no, at = cp->ac_tbl_no;
        if (dt < 0 || dt >= NUM_HUFF_TBLS || at < 0 || at >= NUM_HUFF_TBLS ||
            !ci->dc_huff_tbl_ptrs[dt] || !ci->ac_huff_tbl_ptrs[at])
            return SL_ENOTSUP;
        /* each table checked once per image, not once per block (six
         * blocks of 4:2:0 share two pairs of tables) */
        if (!(built >> dt & 1) && !sl_huff_build(&h->dc[dt], ci->dc_huff_tbl_ptrs[dt], 0))
            return SL_ENOTSUP;
        if (!(built >> (4 + at) & 1) &&
            !sl_huff_build(&h->ac[at], ci->ac_huff_tbl_ptrs[at], 1))
            return SL_ENOTSUP;
        built |= 1u << dt | 1u << (4 + at);
        h->bdc[b] = &h->dc[dt];
        h->bac[b] = &h->ac[at];
        h->bcomp[b] = c;
        h->bstore[b] = cp->DCT_scaled_size > 1;
    }
    h->nblk = ci->blocks_in_MCU;
    h->p = ci->src->next_input_byte;
    h->end = h->p + ci->src->bytes_in_buffer;
    h->acc = 0;
    h->nbits = 0;
    h->marker = 0;
    h->fake = 0;
    memset(h->dc_pred, 0, sizeof h->dc_pred);
    h->col = 0;
    return SL_OK;
}

int sl_huff_install(struct jpeg_decompress_struct *ci, sl_huff **hp)
{
    if (!supported(ci) || ci->restart_interval)
        return SL_ENOTSUP;
    int rc = prepare(ci, hp);
    if (rc)
        return rc;
    ci->client_data = *hp;
    ci->entropy->decode_mcu = decode_mcu;
    return SL_OK;
}

int sl_huff_seek(struct jpeg_decompress_struct *ci, sl_huff **hp, const sl_huff_plan *pl,
                 int libjpeg, unsigned *first_row)
{
    JDIMENSION mrpi = ci->comps_in_scan == 1 ? (JDIMENSION)ci->cur_comp_info[0]->v_samp_factor : 1;
    const sl_jpeg_restarts *r = pl->rst;
    if (!supported(ci) || !ci->restart_interval || !r || r->scans != 1 || r->n == 0 ||
        r->interval != ci->restart_interval || !pl->base || mrpi < 1 || ci->MCUs_per_row < 1 ||
        pl->col1 >= ci->MCUs_per_row || pl->col0 > pl->col1 || pl->row0 >= pl->row1)
        return SL_ENOTSUP;
    uint64_t mcus = (uint64_t)ci->MCUs_per_row * ci->MCU_rows_in_scan;
    if (r->n != (mcus + ci->restart_interval - 1) / ci->restart_interval)
        return SL_ENOTSUP; /* sl_jpeg_scan refuses such files first */
    int rc = SL_OK;
    if (!libjpeg)
        rc = prepare(ci, hp);
    else if (!*hp && !(*hp = calloc(1, sizeof **hp)))
        rc = sl_fail(SL_ENOMEM, "sl_huff_seek: out of memory");
    if (rc)
        return rc;
    sl_huff *h = *hp;
    h->ri = ci->restart_interval;
    h->base = pl->base;
    h->len = pl->len;
    h->end = pl->base + pl->len;
    h->off = r->off;
    h->noff = r->n;
    h->mpr = ci->MCUs_per_row;
    h->r0 = pl->row0 * mrpi;
    h->r1 = pl->row1 * mrpi < ci->MCU_rows_in_scan ? pl->row1 * mrpi : ci->MCU_rows_in_scan;
    h->c0 = pl->col0;
    h->c1 = pl->col1;
    h->reading = 0;
    h->seg = ((uint64_t)h->r0 * h->mpr + h->c0) / h->ri * h->ri;
    /* Whole iMCU rows before the first interval read are not even called
     * for (decode_yuv.c moves libjpeg's row counters past them); a
     * component of several MCU rows per iMCU row starts at row 0. */
    JDIMENSION first = mrpi == 1 ? (JDIMENSION)(h->seg / h->mpr) : 0;
    h->row = first * mrpi;
    h->rcol = 0;
    h->lj = libjpeg ? ci->entropy->decode_mcu : NULL;
    ci->client_data = h;
    ci->entropy->decode_mcu = decode_mcu_seek;
    *first_row = first;
    return SL_OK;
}

void sl_huff_free(sl_huff *h)
{
    free(h);
}
