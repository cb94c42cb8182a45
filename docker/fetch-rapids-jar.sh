#!/usr/bin/env bash
# Build step of the CUDA images (spark-worker.Dockerfile, driver-cuda.Dockerfile): puts the RAPIDS Accelerator jar
# into /opt/sparkRapidsPlugin, where the driver's gpu profile looks for it (app/spark/profile.py), when the build
# arg RAPIDS_VERSION is set. Off by default: without the jar the gpu profile keeps GPU scheduling and runs SQL on CPUs.
#
# Pick a RAPIDS release whose notes list the image's Spark version (pyspark 4.3.0 here) as supported: Spark 4.x needs
# the Scala 2.13 build (rapids-4-spark_2.13), and a jar without a shim for the running Spark version makes the
# driver's SparkSession fail to start.
#
# Environment (from the build args): RAPIDS_VERSION (e.g. 25.10.0; empty = skip), RAPIDS_SCALA_VERSION (2.13),
# RAPIDS_CLASSIFIER (empty, or e.g. cuda12), RAPIDS_SHA256 (optional pin, checked in addition to Maven's .sha1),
# RAPIDS_REPOSITORY (https://repo1.maven.org/maven2).
set -euo pipefail

version="${RAPIDS_VERSION:-}"
scala="${RAPIDS_SCALA_VERSION:-2.13}"
classifier="${RAPIDS_CLASSIFIER:-}"
repository="${RAPIDS_REPOSITORY:-https://repo1.maven.org/maven2}"
dest="/opt/sparkRapidsPlugin"

mkdir -p "${dest}"
if [ -z "${version}" ]; then
  echo "fetch-rapids-jar: RAPIDS_VERSION is not set: no RAPIDS jar in this image"
  exit 0
fi
[[ "${version}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "fetch-rapids-jar: RAPIDS_VERSION '${version}' is not X.Y.Z" >&2; exit 1; }

name="rapids-4-spark_${scala}-${version}${classifier:+-${classifier}}.jar"
url="${repository}/com/nvidia/rapids-4-spark_${scala}/${version}/${name}"
curl -fsSL --retry 3 -o "${dest}/${name}" "${url}"
sha1="$(curl -fsSL --retry 3 "${url}.sha1" | awk '{print $1}')"
echo "${sha1}  ${dest}/${name}" | sha1sum -c -
if [ -n "${RAPIDS_SHA256:-}" ]; then
  echo "${RAPIDS_SHA256}  ${dest}/${name}" | sha256sum -c -
fi
chmod 0644 "${dest}/${name}"
echo "fetch-rapids-jar: ${dest}/${name}"
