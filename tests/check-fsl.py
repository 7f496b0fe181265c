#!/usr/bin/env python3
"""check-fsl.py — an independent reader for summarize's `naming: fsl` files
(tests/run-fsl.sh). Standard library only: gzip and struct parse the NIfTI-1
header and the float32 data, so nothing is shared with nlflow's own reader.

  check-fsl.py maps MASK T P P_FWE TSTAT1 VOX_P VOX_CORRP
      TSTAT1 holds T's values bit for bit, VOX_P = 1.0f - P and
      VOX_CORRP = 1.0f - P_FWE voxel by voxel (float32 arithmetic), all three
      are 0 where MASK is 0 (where P and P_FWE hold 1), the 1 - p files carry
      intent 0 and a description naming randomise, TSTAT1 carries T's intent,
      and each file's JSON sidecar states the header's intent.
  check-fsl.py same A B
      A and B hold the same dimensions and the same float32 values.
Exits 1 with a message on the first difference.
"""
import gzip
import json
import math
import struct
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read_nifti(path):
    raw = gzip.open(path, "rb").read() if path.endswith(".gz") else open(path, "rb").read()
    if len(raw) < 352:
        fail(f"{path}: {len(raw)} bytes, shorter than a NIfTI-1 header")
    end = "<" if struct.unpack("<i", raw[0:4])[0] == 348 else ">"
    if struct.unpack(end + "i", raw[0:4])[0] != 348 or raw[344:348] != b"n+1\0":
        fail(f"{path}: not a single-file NIfTI-1 image")
    dim = struct.unpack(end + "8h", raw[40:56])
    intent_p1 = struct.unpack(end + "f", raw[56:60])[0]
    intent, datatype, bitpix = struct.unpack(end + "3h", raw[68:74])
    vox_offset = int(struct.unpack(end + "f", raw[108:112])[0])
    slope, inter = struct.unpack(end + "2f", raw[112:120])
    descrip = raw[148:228].split(b"\0")[0].decode("ascii", "replace")
    if datatype != 16 or bitpix != 32:
        fail(f"{path}: datatype {datatype} (bitpix {bitpix}), expected float32")
    if slope not in (0.0, 1.0) or inter != 0.0:
        fail(f"{path}: scaled data (scl_slope {slope}, scl_inter {inter})")
    n = 1
    for d in dim[1:dim[0] + 1]:
        n *= d
    data = raw[vox_offset:vox_offset + 4 * n]
    if len(data) != 4 * n:
        fail(f"{path}: {len(data)} bytes of data, expected {4 * n}")
    return {"path": path, "dim": dim[1:dim[0] + 1], "intent": intent, "intent_p1": intent_p1,
            "descrip": descrip, "bytes": data,
            "values": struct.unpack(f"{end}{n}f", data)}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def one_minus(p):
    """1.0f - p as float32 arithmetic gives it: 1 - p is exact in double for
    float32 p >= 2^-29 (at most 53 significant bits), so one rounding to float32
    is the float32 subtraction's result."""
    if p != 0.0 and not math.isnan(p) and abs(p) < 2.0 ** -29:
        fail(f"p = {p!r} is too small for this checker's exact 1 - p")
    return f32(1.0 - p)


def same_value(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def sidecar_intent(nifti_path, img):
    side = nifti_path[:-len(".nii.gz")] + ".json"
    with open(side) as f:
        meta = json.load(f)
    if meta.get("IntentCode") != img["intent"]:
        fail(f"{side}: IntentCode {meta.get('IntentCode')}, the image's header says {img['intent']}")
    return meta


def check_maps(mask_path, t_path, p_path, pfwe_path, tstat_path, voxp_path, corrp_path):
    mask = read_nifti(mask_path)
    t, p, pfwe = read_nifti(t_path), read_nifti(p_path), read_nifti(pfwe_path)
    tstat, voxp, corrp = read_nifti(tstat_path), read_nifti(voxp_path), read_nifti(corrp_path)
    for img in (t, p, pfwe, tstat, voxp, corrp):
        if img["dim"] != mask["dim"]:
            fail(f"{img['path']}: dimensions {img['dim']}, the mask's are {mask['dim']}")
    if tstat["bytes"] != t["bytes"]:
        fail(f"{tstat_path}: values differ from {t_path}")
    if tstat["intent"] != t["intent"] or tstat["intent_p1"] != t["intent_p1"]:
        fail(f"{tstat_path}: intent {tstat['intent']} ({tstat['intent_p1']}), "
             f"the statistic map's is {t['intent']} ({t['intent_p1']})")
    inside = changed = 0
    for src, out, what in ((p, voxp, "vox_p"), (pfwe, corrp, "vox_corrp")):
        if out["intent"] != 0:
            fail(f"{out['path']}: intent {out['intent']}, expected 0 (1 - p is no p-value)")
        if "randomise" not in out["descrip"]:
            fail(f"{out['path']}: descrip '{out['descrip']}' does not name randomise")
        for i, (m, pv, ov) in enumerate(zip(mask["values"], src["values"], out["values"])):
            if m == 0.0:
                if pv != 1.0:
                    fail(f"{src['path']}: voxel {i} outside the mask holds {pv}, expected 1")
                if ov != 0.0:
                    fail(f"{out['path']}: voxel {i} outside the mask holds {ov}, expected 0")
                continue
            inside += 1
            want = one_minus(pv)
            if not same_value(ov, want):
                fail(f"{out['path']}: voxel {i} holds {ov!r}, 1.0f - p = {want!r} (p = {pv!r})")
            changed += ov != pv
    for i, (m, v) in enumerate(zip(mask["values"], tstat["values"])):
        if m == 0.0 and v != 0.0:
            fail(f"{tstat_path}: voxel {i} outside the mask holds {v}, expected 0")
    if inside == 0 or changed == 0:
        fail("no voxel inside the mask where 1 - p differs from p: the check proves nothing")
    for path, img in ((tstat_path, tstat), (voxp_path, voxp), (corrp_path, corrp)):
        sidecar_intent(path, img)
    print(f"ok   {inside // 2} voxels in the mask: tstat1 = t, vox_p = 1 - p, "
          f"vox_corrp = 1 - p_fwe; 0 outside")


def check_same(a_path, b_path):
    a, b = read_nifti(a_path), read_nifti(b_path)
    if a["dim"] != b["dim"]:
        fail(f"{b_path}: dimensions {b['dim']}, {a_path} has {a['dim']}")
    for i, (x, y) in enumerate(zip(a["values"], b["values"])):
        if not same_value(x, y):
            fail(f"{b_path}: voxel {i} holds {y!r}, {a_path} holds {x!r}")


def main(argv):
    if len(argv) == 9 and argv[1] == "maps":
        check_maps(*argv[2:])
    elif len(argv) == 4 and argv[1] == "same":
        check_same(argv[2], argv[3])
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main(sys.argv)
