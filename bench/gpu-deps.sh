#!/usr/bin/env bash
# gpu-deps.sh — download the .deb files of nlflow's build dependencies into
# .gpu-deps/ (apt-get download: no root, nothing installed), for a GPU machine
# whose image lacks them and reaches no package registry. bench/gpu-check.sh
# unpacks them under /tmp/nf-deps there. Run on a Debian/Ubuntu x86-64
# machine where apt works; carry .gpu-deps to the GPU machine (it must be
# git-ignored to be carried: `echo /.gpu-deps/ >> .git/info/exclude`).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.gpu-deps"
cd "$root/.gpu-deps"
# headers and link-time symlinks (-dev) and the run-time libraries they need;
# make, for an image without it
apt-get download \
    libyaml-dev libyaml-0-2 libsqlite3-dev libsqlite3-0 \
    libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0 \
    zlib1g zlib1g-dev libzstd-dev libzstd1 libxxhash-dev libxxhash0 libpng-dev libpng16-16 \
    libcmocka-dev libcmocka0 libnifti2-dev libniftiio-dev libnifti2-2 libnifticdf-dev libnifticdf2 \
    libznz-dev libznz3 libdeflate-dev libdeflate0 make
du -sh "$root/.gpu-deps"
