#!/usr/bin/env bash
# tests/data/encoders.sh OUT - JPEGs of tests/data/photos as other encoders write
# them, for the lossless restart-marker tests (tests/records/test_restart.c, issue
# 41): the three camera photos as they are, and each decoded and encoded again by
#   cjpeg      (libjpeg-turbo-progs) default, -optimize, -progressive, -arithmetic,
#              4:2:2, 4:4:4 q100, gray, float DCT q60, -restart 2 (markers already)
#   jpegtran   (libjpeg-turbo-progs) -optimize -copy all, -progressive, -arithmetic
#   ImageMagick (imagemagick, /usr/bin/convert) q85, 4:4:4, -interlace Plane
#              (progressive), gray, an odd size (37%)
#   Pillow     (python3-pil) q95 4:4:4, optimize + progressive, q50 4:2:0 odd size
#   ffmpeg     (ffmpeg's mjpeg encoder) yuvj420p, yuvj422p, yuvj444p
# plus one with EXIF and ICC segments (Pillow), whose bytes must survive.
# Fails naming the Debian package of a missing encoder (tools/dev deps installs
# them all). Deterministic encoders: the same files every run.
set -euo pipefail
out=${1:?usage: encoders.sh OUT}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for t in cjpeg:libjpeg-turbo-progs djpeg:libjpeg-turbo-progs jpegtran:libjpeg-turbo-progs \
         /usr/bin/convert:imagemagick /usr/bin/python3:python3 ffmpeg:ffmpeg; do
  command -v "${t%%:*}" >/dev/null || { echo "encoders.sh: ${t%%:*} missing: apt-get install ${t##*:} (tools/dev deps)" >&2; exit 1; }
done
/usr/bin/python3 -c 'import PIL' 2>/dev/null || { echo "encoders.sh: Pillow missing: apt-get install python3-pil (tools/dev deps)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in "$here"/photos/*.jpg; do
  n=$(basename "$f" .jpg)
  cp "$f" "$out/$n-camera.jpg"
  djpeg -ppm "$f" > "$tmp/$n.ppm"
  djpeg -ppm -grayscale "$f" > "$tmp/$n.pgm"
  cjpeg -quality 75 "$tmp/$n.ppm" > "$out/$n-cjpeg.jpg"
  cjpeg -quality 90 -optimize "$tmp/$n.ppm" > "$out/$n-cjpeg-opt.jpg"
  cjpeg -quality 80 -progressive "$tmp/$n.ppm" > "$out/$n-cjpeg-prog.jpg"
  cjpeg -quality 80 -arithmetic "$tmp/$n.ppm" > "$out/$n-cjpeg-arith.jpg"
  cjpeg -quality 85 -sample 2x1 "$tmp/$n.ppm" > "$out/$n-cjpeg-422.jpg"
  cjpeg -quality 100 -sample 1x1 "$tmp/$n.ppm" > "$out/$n-cjpeg-444-q100.jpg"
  cjpeg -quality 70 "$tmp/$n.pgm" > "$out/$n-cjpeg-gray.jpg"
  cjpeg -quality 60 -dct float "$tmp/$n.ppm" > "$out/$n-cjpeg-float.jpg"
  cjpeg -quality 80 -restart 2 "$tmp/$n.ppm" > "$out/$n-cjpeg-rst.jpg"
  jpegtran -optimize -copy all "$f" > "$out/$n-jpegtran-opt.jpg"
  jpegtran -progressive -copy all "$f" > "$out/$n-jpegtran-prog.jpg"
  jpegtran -arithmetic "$f" > "$out/$n-jpegtran-arith.jpg"
  /usr/bin/convert "$tmp/$n.ppm" -quality 85 "$out/$n-im.jpg"
  /usr/bin/convert "$tmp/$n.ppm" -quality 70 -sampling-factor 4:4:4 "$out/$n-im-444.jpg"
  /usr/bin/convert "$tmp/$n.ppm" -quality 90 -interlace Plane "$out/$n-im-prog.jpg"
  /usr/bin/convert "$tmp/$n.ppm" -colorspace Gray -quality 60 "$out/$n-im-gray.jpg"
  /usr/bin/convert "$tmp/$n.ppm" -resize 37% -quality 90 "$out/$n-im-small.jpg"
  ffmpeg -loglevel error -y -i "$tmp/$n.ppm" -pix_fmt yuvj420p -q:v 3 "$out/$n-ffmpeg-420.jpg"
  ffmpeg -loglevel error -y -i "$tmp/$n.ppm" -pix_fmt yuvj422p -q:v 5 "$out/$n-ffmpeg-422.jpg"
  ffmpeg -loglevel error -y -i "$tmp/$n.ppm" -pix_fmt yuvj444p -q:v 2 "$out/$n-ffmpeg-444.jpg"
done
/usr/bin/python3 - "$tmp" "$out" <<'PY'
import glob, os, sys
from PIL import Image
tmp, out = sys.argv[1:3]
for f in sorted(glob.glob(tmp + '/*.ppm')):
    n = os.path.basename(f)[:-4]
    im = Image.open(f).convert('RGB')
    im.save(f'{out}/{n}-pil-q95-444.jpg', quality=95, subsampling=0)
    im.save(f'{out}/{n}-pil-opt-prog.jpg', quality=75, optimize=True, progressive=True)
    im.resize((im.width * 5 // 7 | 1, im.height * 3 // 5 | 1)).save(
        f'{out}/{n}-pil-q50-odd.jpg', quality=50, subsampling=2)
    # EXIF (APP1) and an ICC profile (APP2): segments a rewrite must copy
    exif = Image.Exif()
    exif[0x010F] = 'sluice-test-camera'
    icc = b'\0' * 128 + b'sluice-icc-test' * 20
    im.save(f'{out}/{n}-pil-exif-icc.jpg', quality=88, exif=exif, icc_profile=icc)
PY
