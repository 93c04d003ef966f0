/*
 * pipeline/image/huff_tab.c - the lookup tables of huff.c's entropy
 * decoder, built from one of the scan's Huffman tables (JHUFF_TBL) and
 * kept for the next image while its table is the same: look (code ->
 * symbol), fast (a whole coefficient, or a DC difference), skip2 (up to two
 * symbols read past) and pair (one or two stored coefficients).
 * huff_int.h gives the entries' formats; huff.c's comment says why each
 * table exists.
 *
 * Threading: one table per decoder (per thread).
 */
#include <string.h>

#include "pipeline/image/huff_int.h"

/* ------------------------------------------------------------- tables */

/* How far a symbol's skip_entry e moves the coefficient index: run + 1
 * (a ZRL is run 15 of nothing: 16, as in the decode loop); EOB 0. */
static uint32_t advance(uint32_t e)
{
    return (e & E_EOB) ? 0 : (e >> 8 & 15) + 1;
}

/* One AC symbol as its look entry e (nonzero) gives it: bits of code +
 * magnitude, the run, E_EOB. */
static uint32_t skip_entry(uint32_t e)
{
    uint32_t l = e >> 8, r = e >> 4 & 15, s = e & 15;
    return s == 0 && r != 15 ? E_EOB | l : r << 8 | (l + s);
}

/* skip2 from look: a second symbol where the first leaves room
 * in the HB bits for the second's code (its magnitude bits may lie past
 * them: they are only dropped, and the buffer holds >= 32 bits). */
static void build_skip2(sl_htab *t)
{
    for (uint32_t pk = 0; pk < HN; pk++) {
        t->skip2[pk] = 0;
        if (!t->look[pk])
            continue;
        uint32_t e1 = skip_entry(t->look[pk]), b1 = e1 & 0xFF, a1 = advance(e1);
        uint32_t v = b1 | b1 << 5 | a1 << 10 | a1 << 17 | S_ONE;
        if (e1 & E_EOB) {
            t->skip2[pk] = v | S_EOB1;
            continue;
        }
        if (b1 < HB) {
            uint32_t q = (pk << b1) & (HN - 1), l2 = t->look[q] >> 8;
            uint32_t e2 = l2 ? skip_entry(t->look[q]) : 0;
            if (l2 && l2 <= HB - b1)
                v = b1 | (b1 + (e2 & 0xFF)) << 5 | a1 << 10 | (a1 + advance(e2)) << 17 | S_ONE |
                    S_TWO | ((e2 & E_EOB) ? S_EOB2 : 0);
        }
        t->skip2[pk] = v;
    }
}

/* One pair entry (P_*): bits used, a, g, the move of k, two values. */
static uint64_t pair_entry(uint32_t bits, uint32_t a, uint32_t g, uint32_t move, int32_t v1,
                           int32_t v2)
{
    return bits | a << 8 | g << 16 | move << 24 | (uint64_t)(uint16_t)v1 << 32 |
           (uint64_t)(uint16_t)v2 << 48;
}

/* pair from fast: per lookahead, the first symbol (a coefficient, EOB,
 * or ZRL: a zero 16 places on, as fast has it) and, where its bits leave
 * room in the HB for the second symbol's code and magnitude, the second
 * (a coefficient, or EOB; a ZRL is never a second). JCOEF is 16 bits:
 * fast's values fit. */
static void build_pair(sl_htab *t)
{
    for (uint32_t pk = 0; pk < HN; pk++) {
        uint32_t f = t->fast[pk], b1 = f & 0xFF, a1 = (f >> 8 & 15) + 1;
        int32_t v1 = (int32_t)f >> 16;
        if (!f) {
            t->pair[pk] = P_NONE;
            continue;
        }
        if (f & E_EOB) {
            t->pair[pk] = pair_entry(b1, 1, 1, 64, 0, 0);
            continue;
        }
        t->pair[pk] = pair_entry(b1, a1, a1, a1, v1, 0);
        if (v1 == 0 || b1 >= HB) /* ZRL, or no room */
            continue;
        uint32_t q = (pk << b1) & (HN - 1), f2 = t->fast[q], b2 = f2 & 0xFF;
        int32_t v2 = (int32_t)f2 >> 16;
        if (!f2 || b2 > HB - b1)
            continue;
        if (f2 & E_EOB)
            t->pair[pk] = pair_entry(b1 + b2, a1, a1 + 1, 64, v1, 0);
        else if (v2 != 0) {
            uint32_t g = a1 + (f2 >> 8 & 15) + 1;
            t->pair[pk] = pair_entry(b1 + b2, a1, g, g, v1, v2);
        }
    }
}

/* Build t from h (the checks of jpeg_make_d_derived_tbl, which already
 * accepted it at start_pass: they are made again here, each before the
 * entries it guards are written). 0 on a table libjpeg would refuse. */
int sl_huff_build(sl_htab *t, const JHUFF_TBL *h, int ac)
{
    int n = 0;
    for (int l = 1; l <= 16; l++)
        n += h->bits[l];
    if (n > 256)
        return 0;
    if (t->ok && memcmp(t->bits, h->bits, sizeof t->bits) == 0 &&
        memcmp(t->vals, h->huffval, (size_t)n) == 0)
        return 1; /* built, and checked, for an earlier image */
    /* Canonical codes (C.2): no code of length l may be all ones, so the
     * codes of each length fit below 2^l - 1; an over-full table would
     * put look entries past look[HN]. */
    for (int32_t l = 1, code = 0; l <= 16; l++) {
        if (h->bits[l] && code + h->bits[l] >= (1 << l))
            return 0;
        code = (code + h->bits[l]) << 1;
    }
    t->ok = 0;
    memcpy(t->bits, h->bits, sizeof t->bits);
    memcpy(t->vals, h->huffval, (size_t)n);
    memset(t->look, 0, sizeof t->look);
    memset(t->fast, 0, sizeof t->fast);
    int32_t code = 0, p = 0;
    for (int l = 1; l <= 16; l++) {
        int c = h->bits[l];
        if (c) {
            t->valoff[l] = p - code;
            for (int i = 0; i < c; i++, p++, code++) {
                int sym = h->huffval[p];
                if (!ac && sym > 15)
                    return 0;
                if (l <= HB) {
                    int lo = code << (HB - l), m = 1 << (HB - l);
                    int r = sym >> 4, s = sym & 15;
                    for (int j = 0; j < m; j++) {
                        int pk = lo + j;
                        t->look[pk] = (uint16_t)(l << 8 | sym);
                        if (!ac)
                            continue;
                        if (s == 0 && r != 15) {
                            t->fast[pk] = E_EOB | (uint32_t)l;
                        } else {
                            if (s == 0) /* ZRL: a zero 16 places on */
                                t->fast[pk] = (uint32_t)(15 << 8 | l);
                            else if (l + s <= HB) {
                                uint32_t v = (uint32_t)(pk >> (HB - l - s)) & ((1u << s) - 1);
                                t->fast[pk] = (uint32_t)extend(v, s) << 16 |
                                              (uint32_t)(r << 8 | (l + s));
                            }
                        }
                    }
                }
            }
            t->maxcode[l] = code - 1;
        } else {
            t->maxcode[l] = -1;
        }
        code <<= 1;
    }
    t->maxcode[17] = 0x7fffffff;
    if (ac) {
        build_skip2(t);
        build_pair(t);
    }
    t->ok = 1;
    return 1;
}

