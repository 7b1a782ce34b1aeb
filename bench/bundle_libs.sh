# bundle_libs.sh — sourced where a GPU machine's bundle is prepared (bundle.sh, family_gpu.sh,
# calibrate.sh): bundle_libs DIR copies into DIR the shared libraries the executables built here
# need and the GPU machine lacks (the reference BLAS, its Fortran runtime, jansson);
# bench/device_env.sh puts DIR first on the library path there (DEVICE_BUNDLE).
bundle_libs() {
  local l
  mkdir -p "$1"
  for l in libblas.so.3 libgfortran.so.5 libquadmath.so.0 libjansson.so.4; do
    cp -L /lib/x86_64-linux-gnu/$l "$1"/ 2>/dev/null || cp -L /usr/lib/x86_64-linux-gnu/blas/$l "$1"/
  done
}
