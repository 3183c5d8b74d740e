#!/usr/bin/env bash
# Installs what satsgate needs on a fresh Debian/Ubuntu machine: system packages
# (as root, or through sudo when available) and a virtual environment in .venv.
# Usage: scripts/setup.sh [--test]   (--test adds the test and benchmark tools)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(fonts-dejavu-core fonts-noto-core fonts-wqy-microhei libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz0b)
APT_PACKAGES+=(tesseract-ocr tesseract-ocr-eng tesseract-ocr-deu tesseract-ocr-fra tesseract-ocr-spa tesseract-ocr-ita tesseract-ocr-por tesseract-ocr-nld tesseract-ocr-jpn pandoc ffmpeg)  # documents: OCR, office/e-book and media conversion
APT_PACKAGES+=(openssl)  # boarding passes: the signed-pass test verifies the PKCS#7 signature with openssl cms
APT_PACKAGES+=(apertium apertium-eng-spa apertium-eng-cat apertium-spa-cat apertium-es-pt apertium-fr-es apertium-spa-ita apertium-es-gl apertium-en-gl apertium-es-ro apertium-eu-en apertium-isl-eng apertium-mkd-eng apertium-eo-en apertium-hbs-eng apertium-oc-ca apertium-oc-es apertium-oci-fra apertium-cat-srd apertium-srd-ita apertium-spa-ast)  # translation: Apertium pairs (the last six: into Occitan, Sardinian, Asturian for translate-rare-language)
APT_PACKAGES+=(espeak-ng ffmpeg)  # speech: text-to-speech, audio decoding, M4B audiobooks
if [ "${1:-}" = "--test" ]; then
  APT_PACKAGES+=(chromium curl)  # curl: tests/system/test_readme.py runs the README's walk-through
  # The store's tests on PostgreSQL start a throwaway cluster of their own (tests/pg_cluster.py)
  # with this package's initdb and pg_ctl; no server of the package is used.
  APT_PACKAGES+=(postgresql)
  # tests/system/test_interop_clients.py: mppx, the MPP TypeScript SDK. A Node.js that already
  # brings npm (NodeSource's nodejs package does, and conflicts with Debian's npm) is used.
  command -v npm >/dev/null 2>&1 || APT_PACKAGES+=(nodejs npm)
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "installing system packages: ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if [ "${1:-}" = "--test" ]; then
  .venv/bin/python -m pip install -q -e ".[test]"
else
  .venv/bin/python -m pip install -q -e .
fi
# documents: RapidOCR (Chinese and Japanese OCR; its wheel ships the PP-OCR ONNX models).
# Without its dependencies: they are in pyproject.toml, but for its opencv-python, whose
# cv2 would overwrite opencv-python-headless's.
.venv/bin/python -m pip install -q --no-deps "rapidocr-onnxruntime>=1.4,<1.5"
# Cashu ecash (NUT-24): Nutshell's BDHKE (cashu.core.crypto, which needs only coincurve),
# without the package's dependencies: it pins httpx<0.26 and bitstring<4, which cannot
# share satsgate's environment. satsgate imports nothing else of it, and only when [cashu]
# names a mint.
.venv/bin/python -m pip install -q --no-deps "cashu==0.20.2"
if [ "${1:-}" = "--test" ]; then
  # The tests' real Nutshell mint (FakeWallet backend) and payer wallet, in an environment
  # of their own (tests/fakes/cashu_mint.py; SATSGATE_CASHU_MINT_VENV overrides the place).
  MINT_VENV="${SATSGATE_CASHU_MINT_VENV:-.venv-cashu-mint}"
  if [ ! -x "$MINT_VENV/bin/mint" ]; then
    "$PY" -m venv "$MINT_VENV"
    "$MINT_VENV/bin/python" -m pip install -q "cashu==0.20.2" "marshmallow<4" "limits<5"
  fi
  # pyl402 for the interop tests, in an environment of its own: it pins httpx<0.28
  # (tests/system/test_interop_clients.py; SATSGATE_PYL402_VENV overrides the place).
  PYL402_VENV="${SATSGATE_PYL402_VENV:-.venv-pyl402}"
  if ! "$PYL402_VENV/bin/python" -c "import pyl402" 2>/dev/null; then
    "$PY" -m venv "$PYL402_VENV"
    "$PYL402_VENV/bin/python" -m pip install -q "pyl402==0.1.2"
  fi
  # routeweiler (it pins cryptography<45) and ln-church-agent (bolt11<2.1.1, whose bolt11
  # needs bitstring<5) likewise, each in its own (SATSGATE_ROUTEWEILER_VENV,
  # SATSGATE_LN_CHURCH_VENV override the places).
  ROUTEWEILER_VENV="${SATSGATE_ROUTEWEILER_VENV:-.venv-routeweiler}"
  if ! "$ROUTEWEILER_VENV/bin/python" -c "import routeweiler" 2>/dev/null; then
    "$PY" -m venv "$ROUTEWEILER_VENV"
    "$ROUTEWEILER_VENV/bin/python" -m pip install -q "routeweiler==0.1.2"
  fi
  LN_CHURCH_VENV="${SATSGATE_LN_CHURCH_VENV:-.venv-ln-church}"
  if ! "$LN_CHURCH_VENV/bin/python" -c "import ln_church_agent" 2>/dev/null; then
    "$PY" -m venv "$LN_CHURCH_VENV"
    "$LN_CHURCH_VENV/bin/python" -m pip install -q "ln-church-agent==1.18.17" "bitstring<5"
  fi
  # mppx (the MPP TypeScript SDK) for the interop tests, at the versions of the lockfile,
  # into tests/js/node_modules.
  (cd tests/js && npm ci --no-audit --no-fund --loglevel=error)
fi
