/*
 * records/jpeg_scan.c - structural check of a JPEG stream without decoding.
 *
 * Why: the converter stores JPEGs byte for byte and must reject the ones a
 * decoder would choke on (a truncated download is the usual case) without
 * paying for a decode: a 1/8-scale decode costs ~0.3 ms an image, more than
 * reading, framing and writing it. Walking the marker structure touches each
 * byte once (memchr for 0xFF in entropy-coded data) and catches truncation,
 * a missing frame or scan, and segment lengths that run past the end.
 *
 * Structure (ITU T.81 B.1): SOI, then segments "FF xx len_hi len_lo ...";
 * after SOS, entropy-coded data in which FF is followed by 00 (stuffing) or
 * RST0..7; any other FF xx is the next marker. Progressive files repeat
 * DHT/SOS. EOI ends the image; bytes after EOI are ignored (cameras append).
 *
 * Tables (issue 26): every image must decode alone, as if it were the
 * first on its decoder. An "abbreviated" stream leaves out the tables and
 * relies on ones a previous image left in the decoder (libjpeg keeps them
 * in the decompress object: T.81 B.5's abbreviated format); sluice's
 * decoders start each image afresh, so such a stream cannot decode, and
 * this check says so before anything is stored or trained on: each scan's
 * components must have their quantization table (DQT) defined before the
 * scan, and the Huffman tables the scan uses (sequential: DC and AC of
 * every component; progressive: DC for a first DC scan, AC for an AC
 * scan, none for DC refinement, as libjpeg's jdphuff.c) defined by a DHT
 * before it. One exception, libjpeg-turbo's (jdhuff.c, jinit_huff_decoder,
 * for Motion-JPEG frames): a sequential Huffman scan whose table 0 or 1 no
 * DHT defines uses the standard table of T.81 Annex K.3 in that slot, and
 * SL_JPEG_STD_HUFF says so. Frames libjpeg does not decode (lossless,
 * hierarchical) and malformed segments are left to the decoder, which
 * fails on them; this check never refuses what a fresh libjpeg object
 * decodes because of a table.
 *
 * Fill bytes (T.81 B.1.1.2): any number of FF may precede a marker; a
 * stuffed FF 00 is not a marker, so FF FF 00 in entropy-coded data is not
 * a valid stream. libjpeg-turbo 2.1 reads it two ways: its slow path
 * (jpeg_fill_bit_buffer) takes FF..FF 00 as one FF data byte; its fast
 * path (decode_mcu_fast, taken while 512 bytes a block remain) takes
 * FF FF for a marker, fills zeros, gives up the MCU and re-decodes it on
 * the slow path, but the coefficients the aborted pass wrote stay in the
 * blocks. The pixels then depend on where the bytes lie in the buffer
 * (djpeg's 4 KiB reads differ from a memory source), and sluice's own
 * Huffman decoder (pipeline/image/huff.c) cannot give the same batch. Such a
 * stream is refused here (SL_EIMAGE naming the byte), before either
 * decoder runs; fill bytes before a real marker stay allowed.
 *
 * Restart markers (issue 41): RST0..7 split a scan into intervals of the
 * restart interval's MCUs (DRI, T.81 B.2.4.4), numbered 0..7 in turn from
 * each scan's first. The pipeline starts decoding at an interval that a
 * crop needs (pipeline/image/huff.c), so the k-th interval must be where the
 * k-th marker says: each marker must carry the next number, and a scan
 * must have exactly one interval per restart interval of its MCUs (the
 * frame's size and sampling give them), with one marker at the scan's end
 * tolerated (libjpeg reads past it). libjpeg-turbo's own decoder takes a
 * wrong number for lost data (jpeg_resync_to_restart, a warning that
 * sluice's decoders treat as an error) and a missing marker the same way,
 * so refusing them here refuses nothing that decodes cleanly, only
 * earlier: in convert and verify, and in the pipeline before a seek could
 * start at the wrong place. sl_jpeg_scan_restarts also gives the byte
 * where each interval of the first scan starts.
 */
#include <stdlib.h>
#include <string.h>

#include "records.h"

static int is_sof(uint8_t m)
{
    /* C0..CF are frames except DHT (C4), JPG (C8) and DAC (CC). */
    return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

/* Tables defined so far and the frame's components (for the table check). */
typedef struct scan_tables {
    unsigned q;          /* bit t: DQT table t defined */
    unsigned dc, ac;     /* bit t: DHT DC / AC table t defined */
    uint8_t sof;         /* the frame's marker, 0 before it */
    int nc;              /* components (0: not checked, see read_sof) */
    uint8_t id[16], tq[16];
    uint8_t hs[16], vs[16]; /* sampling factors (restart check; 0: not known) */
    unsigned w, h;       /* the frame's size (h 0: DNL, not checked) */
    unsigned dri;        /* the restart interval in force (DRI), MCUs */
} scan_tables;

/* The DQT segment's tables (libjpeg's get_dqt: Pq/Tq, 64 values of 1 or
 * 2 bytes). A bad index or a short table ends the walk: libjpeg fails the
 * segment itself. */
static void read_dqt(scan_tables *t, const uint8_t *p, const uint8_t *end)
{
    while (p < end) {
        unsigned n = *p, size = 1 + 64 * ((n >> 4) ? 2u : 1u);
        if ((n & 15) > 3 || (size_t)(end - p) < size)
            return;
        t->q |= 1u << (n & 15);
        p += size;
    }
}

/* The DHT segment's tables (get_dht: Tc/Th, 16 counts, the symbols). */
static void read_dht(scan_tables *t, const uint8_t *p, const uint8_t *end)
{
    while (end - p >= 17) {
        unsigned n = p[0], count = 0;
        for (int i = 1; i <= 16; i++)
            count += p[i];
        if ((n & ~0x13u) != 0 || count > 256 || (size_t)(end - p) < 17 + count)
            return;
        if (n & 0x10)
            t->ac |= 1u << (n & 3);
        else
            t->dc |= 1u << (n & 3);
        p += 17 + count;
    }
}

/* SOFn: P, Y, X, Nf, then Nf x (C, H/V, Tq). A frame libjpeg cannot take
 * (more components than these arrays, a short segment) is not checked. */
static void read_sof(scan_tables *t, uint8_t m, const uint8_t *p, const uint8_t *end)
{
    t->sof = m;
    t->nc = 0;
    if (end - p < 6 || p[5] > 16 || (size_t)(end - p) < 6 + 3u * p[5])
        return;
    for (int i = 0; i < p[5]; i++) {
        t->id[i] = p[6 + 3 * i];
        t->hs[i] = p[7 + 3 * i] >> 4;
        t->vs[i] = p[7 + 3 * i] & 15;
        t->tq[i] = p[8 + 3 * i];
    }
    t->h = (unsigned)p[1] << 8 | p[2];
    t->w = (unsigned)p[3] << 8 | p[4];
    t->nc = p[5];
}

/* MCUs in a scan of the frame (libjpeg's jdinput.c: one component, its
 * blocks; several, MCUs of hmax x vmax blocks); 0 when the frame's
 * geometry is not known or not one libjpeg takes (the count is then not
 * checked: the decoder refuses such frames). */
static uint64_t scan_mcus(const scan_tables *t, const uint8_t *sos, const uint8_t *end)
{
    if (t->nc == 0 || t->w == 0 || t->h == 0 || end - sos < 1)
        return 0;
    unsigned ns = sos[0], hmax = 1, vmax = 1;
    for (int i = 0; i < t->nc; i++) {
        if (t->hs[i] < 1 || t->hs[i] > 4 || t->vs[i] < 1 || t->vs[i] > 4)
            return 0;
        hmax = t->hs[i] > hmax ? t->hs[i] : hmax;
        vmax = t->vs[i] > vmax ? t->vs[i] : vmax;
    }
    if (ns == 1 && end - sos >= 2) {
        int c = 0;
        while (c < t->nc && t->id[c] != sos[1])
            c++;
        if (c == t->nc)
            return 0;
        uint64_t bw = ((uint64_t)t->w * t->hs[c] + hmax * 8 - 1) / (hmax * 8);
        uint64_t bh = ((uint64_t)t->h * t->vs[c] + vmax * 8 - 1) / (vmax * 8);
        return bw * bh;
    }
    return (uint64_t)((t->w + 8 * hmax - 1) / (8 * hmax)) * ((t->h + 8 * vmax - 1) / (8 * vmax));
}

/* The start of one more interval of the first scan at byte off. */
static int rst_push(sl_jpeg_restarts *r, size_t off)
{
    if (r->n == r->cap) {
        size_t c = r->cap ? r->cap * 2 : 256;
        uint32_t *p = realloc(r->off, c * sizeof *p);
        if (!p)
            return sl_fail(SL_ENOMEM, "sl_jpeg_scan: out of memory (%zu restart intervals)", c);
        r->off = p;
        r->cap = c;
    }
    r->off[r->n++] = (uint32_t)off;
    return SL_OK;
}

void sl_jpeg_restarts_free(sl_jpeg_restarts *r)
{
    if (!r)
        return;
    free(r->off);
    memset(r, 0, sizeof *r);
}

/* A table used by a scan: SL_OK when defined (or the standard table
 * stands in), SL_EIMAGE naming it otherwise. */
static int need_huff(unsigned defined, unsigned tbl, int seq, const char *cls, uint8_t cid,
                     size_t at, unsigned *flags)
{
    if (tbl < 4 && (defined >> tbl & 1))
        return SL_OK;
    if (seq && tbl < 2) { /* libjpeg-turbo: Annex K.3's table in slot 0 or 1 */
        *flags |= SL_JPEG_STD_HUFF;
        return SL_OK;
    }
    return sl_fail(SL_EIMAGE, "sl_jpeg_scan: scan @ byte %zu: component %u uses %s Huffman table "
                   "%u, which no DHT before it defines (an abbreviated JPEG without its tables)",
                   at, cid, cls, tbl);
}

/* SOS: Ns, Ns x (Cs, Td/Ta), Ss, Se, Ah/Al. Every table the scan uses
 * must be defined by now (see the file comment). at: the marker's byte. */
static int check_sos(const scan_tables *t, const uint8_t *p, const uint8_t *end, size_t at,
                     unsigned *flags)
{
    /* Huffman frames libjpeg 2.1 decodes: sequential C0/C1, progressive C2;
     * arithmetic C9/CA need only quantization tables. */
    int seq = t->sof == 0xC0 || t->sof == 0xC1, prog = t->sof == 0xC2;
    if (!(seq || prog || t->sof == 0xC9 || t->sof == 0xCA) || t->nc == 0)
        return SL_OK;
    if (end - p < 1 || p[0] < 1 || p[0] > 4 || (size_t)(end - p) != 4 + 2u * p[0])
        return SL_OK; /* libjpeg refuses the segment's length */
    unsigned ns = p[0], ss = p[1 + 2 * ns], ah = p[3 + 2 * ns] >> 4;
    for (unsigned i = 0; i < ns; i++) {
        uint8_t cid = p[1 + 2 * i], td = p[2 + 2 * i] >> 4, ta = p[2 + 2 * i] & 15;
        int c = 0;
        while (c < t->nc && t->id[c] != cid)
            c++;
        if (c == t->nc)
            return SL_OK; /* not in the frame: libjpeg refuses the scan */
        if (t->tq[c] > 3 || !(t->q >> t->tq[c] & 1))
            return sl_fail(SL_EIMAGE, "sl_jpeg_scan: scan @ byte %zu: component %u uses "
                           "quantization table %u, which no DQT before it defines (an "
                           "abbreviated JPEG without its tables)", at, cid, t->tq[c]);
        int rc = SL_OK;
        if (seq || (prog && ss == 0 && ah == 0))
            rc = need_huff(t->dc, td, seq, "DC", cid, at, flags);
        if (rc == SL_OK && (seq || (prog && ss != 0)))
            rc = need_huff(t->ac, ta, seq, "AC", cid, at, flags);
        if (rc)
            return rc;
    }
    return SL_OK;
}

/* What a file that is not a JPEG is, by its magic bytes, for the message:
 * a WebDataset sample's .png or .webp member reaches the JPEG decoder as it
 * is, and "no SOI marker" alone did not say why it was skipped. */
static const char *not_jpeg_kind(const uint8_t *d, size_t len)
{
    if (len >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8))
        return "PNG";
    if (len >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4))
        return "WebP";
    if (len >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6)))
        return "GIF";
    if (len >= 2 && d[0] == 'B' && d[1] == 'M')
        return "BMP";
    return NULL;
}

int sl_jpeg_scan(const uint8_t *d, size_t len, unsigned *flags)
{
    return sl_jpeg_scan_restarts(d, len, flags, NULL);
}

int sl_jpeg_scan_restarts(const uint8_t *d, size_t len, unsigned *flags, sl_jpeg_restarts *rst)
{
    size_t pos = 2;
    int frame = 0, scans = 0;
    unsigned fl = 0;
    scan_tables t = {0};

    if (flags)
        *flags = 0;
    if (rst) {
        rst->n = 0;
        rst->interval = 0;
        rst->scans = 0;
    }
    /* offsets are 32-bit: larger streams are checked, not mapped */
    sl_jpeg_restarts *map = rst && len <= UINT32_MAX ? rst : NULL;
    if (len < 4 || d[0] != 0xFF || d[1] != 0xD8) {
        const char *kind = not_jpeg_kind(d, len);
        int converts = kind && kind[0] != 'G'; /* PNG, BMP, WebP: convert reads them */
        if (kind)
            return sl_fail(SL_EIMAGE, "sl_jpeg_scan: not a JPEG file: a %s image (the pipeline "
                           "decodes JPEG only: %s)", kind,
                           converts ? "sluice convert re-encodes it to JPEG, from image files "
                                      "or, --from tfrecord, from shards"
                                    : "re-encode it to JPEG first");
        return sl_fail(SL_EIMAGE, "sl_jpeg_scan: not a JPEG file (no SOI marker)");
    }
    for (;;) {
        if (pos >= len || d[pos] != 0xFF)
            goto bad_marker;
        while (pos < len && d[pos] == 0xFF) /* fill bytes */
            pos++;
        if (pos >= len)
            goto truncated;
        uint8_t m = d[pos++];
        if (m == 0xD9) {
            if (!frame || !scans)
                return sl_fail(SL_EIMAGE, "sl_jpeg_scan: EOI @ byte %zu before any %s", pos - 2,
                               frame ? "scan" : "frame");
            if (flags)
                *flags = fl;
            if (rst)
                rst->scans = scans;
            return SL_OK;
        }
        if ((m >= 0xD0 && m <= 0xD7) || m == 0x01)
            continue; /* standalone markers */
        if (m == 0xD8 || m == 0x00)
            goto bad_marker;
        if (len - pos < 2)
            goto truncated;
        size_t seg = (size_t)d[pos] << 8 | d[pos + 1];
        if (seg < 2)
            return sl_fail(SL_EIMAGE, "sl_jpeg_scan: segment FF%02X @ byte %zu: length %zu", m,
                           pos - 2, seg);
        if (seg > len - pos)
            goto truncated;
        const uint8_t *body = d + pos + 2, *body_end = d + pos + seg;
        if (is_sof(m)) {
            if (!frame) /* a second frame header: libjpeg refuses it */
                read_sof(&t, m, body, body_end);
            frame = 1;
        } else if (m == 0xDB) {
            read_dqt(&t, body, body_end);
        } else if (m == 0xC4) {
            read_dht(&t, body, body_end);
        } else if (m == 0xDD && seg == 4) { /* DRI; another length: libjpeg refuses it */
            t.dri = (unsigned)body[0] << 8 | body[1];
        }
        size_t at = pos - 2;
        pos += seg;
        if (m != 0xDA)
            continue;
        if (!frame)
            return sl_fail(SL_EIMAGE, "sl_jpeg_scan: scan before frame header");
        int rc = check_sos(&t, body, body_end, at, &fl);
        if (rc)
            return rc;
        scans++;
        sl_jpeg_restarts *sm = scans == 1 ? map : NULL; /* the first scan's intervals */
        if (sm) {
            sm->interval = t.dri;
            if ((rc = rst_push(sm, pos)) != SL_OK)
                return rc;
        }
        /* Entropy-coded data: skip to the next FF that starts a marker;
         * restart markers numbered in turn, where the intervals start. */
        uint64_t nrst = 0;        /* restart markers in this scan */
        size_t last_rst = 0;      /* the byte after the last one */
        for (;;) {
            const uint8_t *ff = memchr(d + pos, 0xFF, len - pos);
            if (!ff || (size_t)(ff - d) + 1 >= len)
                goto truncated;
            pos = (size_t)(ff - d);
            size_t q = pos + 1;
            while (q < len && d[q] == 0xFF) /* fill bytes: a marker must follow */
                q++;
            if (q >= len)
                goto truncated;
            uint8_t n = d[q];
            if (n == 0x00 && q > pos + 1)
                return sl_fail(SL_EIMAGE, "sl_jpeg_scan: fill bytes FF FF before a stuffed zero "
                               "@ byte %zu, in entropy-coded data (FF 00 is not a marker, and "
                               "decoders read this differently)", pos);
            if (n >= 0xD0 && n <= 0xD7) {
                if (n - 0xD0 != (int)(nrst & 7))
                    return sl_fail(SL_EIMAGE, "sl_jpeg_scan: scan %d: restart marker RST%d @ "
                                   "byte %zu where RST%d was expected (marker %llu of the scan: "
                                   "one is missing or out of order)", scans, n - 0xD0, pos,
                                   (int)(nrst & 7), (unsigned long long)nrst + 1);
                nrst++;
                last_rst = q + 1;
                if (sm && (rc = rst_push(sm, q + 1)) != SL_OK)
                    return rc;
                fl |= SL_JPEG_RESTART;
            }
            if (n == 0x00 || (n >= 0xD0 && n <= 0xD7)) {
                pos = q + 1; /* stuffing, or a restart marker after any fill bytes */
                continue;
            }
            break; /* the next marker; the loop above skips its fill bytes */
        }
        /* A marker right before the scan's end starts no interval. */
        if (nrst && last_rst == pos) {
            nrst--;
            if (sm)
                sm->n--;
        }
        uint64_t mcus = scan_mcus(&t, body, body_end);
        uint64_t want = !mcus ? nrst + 1 : t.dri ? (mcus + t.dri - 1) / t.dri : 1;
        if (nrst + 1 != want)
            return sl_fail(SL_EIMAGE, "sl_jpeg_scan: scan %d @ byte %zu: %llu restart interval%s "
                           "of %u MCUs where %llu MCUs make %llu (restart markers missing or "
                           "extra)", scans, at, (unsigned long long)nrst + 1, nrst ? "s" : "",
                           t.dri, (unsigned long long)mcus, (unsigned long long)want);
    }
truncated:
    return sl_fail(SL_EIMAGE, "sl_jpeg_scan: truncated JPEG (%zu bytes, no EOI marker)", len);
bad_marker:
    return sl_fail(SL_EIMAGE, "sl_jpeg_scan: expected a marker @ byte %zu", pos);
}
