/* fmha_capi.h compiles as C, and a C caller can fill its structs. */
#include "capi/fmha_capi.h"

int fmha_capi_c_caller_version(void) {
    fmha_problem problem = {FMHA_FP16, 1, 1, 1, 1, 1, 64, 0, -1, -1, 0.f, 0, 0.f, 0, 0, 0};
    fmha_plan plan;
    /* Asks for a plan on device -1, which must fail without touching a GPU. */
    if (fmha_plan_forward(&problem, -1, &plan, 0, 0) != FMHA_INVALID_ARGUMENT) return -1;
    return fmha_abi_version();
}
