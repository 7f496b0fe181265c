/* fuzz_nifti.c — libFuzzer target for the NIfTI-1/2 reader: the header
 * (precheck, libnifti2, our dimension checks) and the voxel data. Inputs
 * that start with the gzip magic are named .nii.gz so that the compressed
 * path is fuzzed too. */
#include "fuzz_common.h"

#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool gz = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    const char *path = fuzz_write_input(gz ? "image.nii.gz" : "image.nii", data, size);
    struct nf_error err = { 0 };
    struct nf_nifti_info info;
    int rc = nf_nifti_read_info(path, &info, &err);
    memset(&err, 0, sizeof err);
    if (rc == 0) {
        struct nf_value *v = nf_nifti_read(path, &err);
        nf_value_unref(v);
    }
    return 0;
}
