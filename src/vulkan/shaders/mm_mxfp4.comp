#version 450
/* mm_mxfp4.comp: the MXFP4 matrix product (mm_q.glsl). */
#define KN_QT 39 /* QT_MXFP4 */
#include "mm_q.glsl"
