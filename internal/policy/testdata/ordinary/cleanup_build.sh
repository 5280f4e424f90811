#!/bin/sh
set -eu
rm -rf ./build dist/ /workspace/build /tmp/cache
mkdir -p build
find . -name '*.pyc' -delete
find /workspace/build -type f -name '*.o' -exec rm {} +
echo done
