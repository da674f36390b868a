#!/bin/sh
# Install the Debian text packages (and the training tools) and assemble the corpus.
# Usage: models/train/corpus.sh [OUTDIR]   (default build-train/corpus, git-ignored)
set -eu
cd "$(dirname "$0")/../.."
OUT=${1:-build-train/corpus}
if [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    bible-kjv bible-kjv-text dict-jargon dict-devil \
    python3-torch python3-regex python3-matplotlib libopenblas0-pthread >/dev/null
fi
/usr/bin/python3 models/train/corpus.py "$OUT"
