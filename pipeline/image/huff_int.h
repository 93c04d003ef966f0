/*
 * pipeline/image/huff_int.h - what huff.c (the entropy decoder) and
 * huff_tab.c (its lookup tables, built from a JPEG's Huffman tables)
 * share: the table type, the entries' formats and the F.12 extension.
 * huff.c's comment explains the decoder and why it exists.
 *
 * Threading: a table is built and read by one decoder (one thread).
 */
#ifndef SL_HUFF_INT_H
#define SL_HUFF_INT_H

#include <stdint.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t first */

#include <jpeglib.h>

#define HB 10 /* lookahead bits */
#define HN (1 << HB)

/* Entries of the fast table (and of skip_entry): bits 0-7 bits used,
 * 8-11 the run, bit 12 end of block, 16-31 the coefficient (fast table).
 * 0: not resolved in HB bits. */
#define E_EOB (1u << 12)

/* Entries of skip2, up to two whole AC symbols per lookup (the blocks
 * nobody stores): bits 0-4 the first symbol's bits (code + magnitude),
 * 5-9 both symbols' bits, 10-16 how far the first moves the coefficient
 * index (run + 1; 16 for ZRL), 17-23 how far both move it; flags: */
#define S_EOB1 (1u << 24) /* the first is EOB */
#define S_TWO (1u << 25)  /* there is a second symbol */
#define S_EOB2 (1u << 26) /* the second is EOB */
#define S_ONE (1u << 27)  /* a first symbol (the entry is not 0) */

/* Entries of pair, the table of the blocks that are stored: one whole
 * coefficient, or two where both symbols (code and magnitude bits) fit in
 * the HB bits, per lookup, with no branch between one and two. Bits 0-7
 * the bits used (the shift count as it is), 8-15 a: the first's value goes
 * to coefficient k + a - 1 (k the index of the next), 16-23 g: the entry
 * applies where k + g <= 64 (every value it writes lands in the block),
 * 24-31 how far k moves (64 where the block ends after the entry: an EOB),
 * 32-47 the first value, 48-63 the second, written to k + g - 1 before the
 * first (an entry of one: g = a and the first overwrites it). An EOB
 * writes 0 at k, a place not written yet: the block is zeroed. P_NONE:
 * the first symbol is not resolved in HB bits (g 255 never applies). */
#define P_NONE ((uint64_t)255 << 16)

typedef struct sl_htab {
    int ok;               /* built */
    uint8_t bits[17];     /* the JHUFF_TBL it was built from */
    uint8_t vals[256];
    uint16_t look[HN];    /* (length << 8) | symbol; 0: code longer than HB */
    uint32_t fast[HN];    /* AC: whole coefficient (see E_*) */
    uint32_t skip2[HN];   /* AC: two symbols (S_*) */
    uint64_t pair[HN];    /* AC: one or two stored coefficients (P_*) */
    int32_t maxcode[18];  /* largest code of each length, -1 none; [17] sentinel */
    int32_t valoff[17];   /* vals index of code c of length l: c + valoff[l] */
} sl_htab;

/* Figure F.12: the s magnitude bits v as a signed value. */
static inline int extend(uint32_t v, int s)
{
    return v < (1u << (s - 1)) ? (int)v - (1 << s) + 1 : (int)v;
}

/* Build t from h for an AC (ac 1) or DC table, or keep t if it was built
 * from the same table already: 1, or 0 on a table libjpeg would refuse
 * (huff_tab.c). */
int sl_huff_build(sl_htab *t, const JHUFF_TBL *h, int ac);

#endif /* SL_HUFF_INT_H */
