# msdet on CPU, the default image: Python 3.11, requirements.txt and MindSpore
# MINDSPORE_VERSION (2.10.0, the tested one; requirements.txt allows 2.7-2.10).
#
#   docker build -t msdet:cpu .
#   scripts/docker_run.sh [train.py overrides ...]      (or: docker run --rm msdet:cpu)
#
# The Ascend image is Dockerfile.ascend. The build context is filtered by .dockerignore.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}
ARG MINDSPORE_VERSION=2.10.0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MSDET_CACHE_DIR=/workspace/.cache/msdet \
    MPLCONFIGDIR=/tmp/matplotlib

# libgomp1: the OpenMP runtime MindSpore's CPU kernels are linked against (not in -slim).
# g++: builds msdet's depthwise convolution kernel on first use (ops/depthwise.py; without
# it training falls back to MindSpore's slower Conv2D).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 g++ \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace
# Requirements first: the dependency layer is rebuilt only when requirements.txt changes.
COPY requirements.txt ./
RUN python -m pip install --no-cache-dir -r requirements.txt "mindspore==${MINDSPORE_VERSION}"

RUN useradd --create-home --uid 1000 --shell /bin/bash msdet \
    && mkdir -p /workspace/runs /workspace/.cache/msdet \
    && chown -R msdet:msdet /workspace
COPY --chown=msdet:msdet . .
# msdet itself, as the package `msdet` (its dependencies are installed above).
RUN python -m pip install --no-cache-dir --no-deps -e .
USER 1000

CMD ["python", "train.py"]
