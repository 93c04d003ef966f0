/*
 * train/ops/graph_cuda.h - private to graph_cuda.c (the plan cache: engine
 * configurations, execution) and graph_build_cuda.c (the operation graphs
 * of cuDNN's documented patterns, descriptor by descriptor).
 *
 * Threading: as the cache, one thread at a time (the context's).
 */
#ifndef SL_GRAPH_CUDA_H
#define SL_GRAPH_CUDA_H

#include <stdbool.h>
#include <stdint.h>

#include "train/ops/cuda_int.h"

typedef cudnnBackendDescriptor_t sl_bdesc;

/* The graphs, in the SL_FUSE_* bit order (1 << g). */
enum { SL_G_FPROP, SL_G_WGRAD, SL_G_DGRAD, SL_NGRAPH };
extern const char *const sl_graph_names[SL_NGRAPH];

/* Unique ids of the real tensors (the variant pack names them); the
 * virtual ones from SL_U_V1 on. */
enum {
    SL_U_X = 1, SL_U_S, SL_U_B, SL_U_W, SL_U_Y, SL_U_SUM, SL_U_SQSUM, SL_U_DY, SL_U_DW,
    SL_U_XC, SL_U_DA, SL_U_MEAN, SL_U_INVSTD, SL_U_GAMMA, SL_U_BETA, SL_U_DGAMMA, SL_U_DBETA,
    SL_U_EQ_DY, SL_U_EQ_X, SL_U_EQ_B,
    SL_U_V1 = 101
};

/* Descriptors kept together and destroyed together (a plan's chain:
 * tensors, operations, graph, configuration, plan), grown as needed:
 * cudnn-frontend keeps the same chain alive for a plan's life. */
typedef struct sl_desc_set {
    sl_bdesc *d;
    int n, cap;
} sl_desc_set;
void sl_desc_set_clear(sl_desc_set *s); /* destroys them, last made first */
/* d kept in s; false (and d destroyed) when the table cannot grow. */
bool sl_desc_set_add(sl_desc_set *s, sl_bdesc d);

/* What is being built: its descriptors, and the first cuDNN call that
 * failed with cuDNN's own words for it (cudnnGetLastErrorString). */
typedef struct sl_graph_builder {
    sl_desc_set *keep;
    cudnnStatus_t st;  /* CUDNN_STATUS_SUCCESS until a call fails */
    char what[400];    /* "call: status: cuDNN's reason" */
} sl_graph_builder;
/* s == SUCCESS; else false, and the first failure recorded in b. */
bool sl_graph_ok(sl_graph_builder *b, cudnnStatus_t s, const char *call);
/* A new descriptor of type t kept in b (NULL after a failure, recorded). */
sl_bdesc sl_graph_desc(sl_graph_builder *b, cudnnBackendDescriptorType_t t);

/* The form a graph is built in where NVIDIA's sources differ:
 *   virt      the intermediates' type: FLOAT (the ConvBNfprop and
 *             DgradDreluBNBwdWeight samples, and Paddle's ConvBNwgrad)
 *             or HALF (cudnn-frontend's ConvBNwgrad sample,
 *             samples/cpp/convolution/wgrads.cpp "scale-bias-relu-wgrad");
 *   mean_sub  DgradDreluBNBwdWeight's mean step: 1 SUB(x, mean)
 *             (cudnn-frontend v1.11.0's sample, cuDNN >= 9.8.0), 0 ADD(x,
 *             mean) with alpha2 = -1 (Paddle's fused_dconv_drelu_dbn_kernel.cu,
 *             for the cuDNN versions before). */
typedef struct sl_graph_form {
    cudnnDataType_t virt;
    int mean_sub;
} sl_graph_form;

/* The finalized operation graph of g for sh in form f on handle h, every
 * descriptor in b->keep; NULL when a call failed (b says which and why). */
sl_bdesc sl_graph_build(sl_graph_builder *b, cudnnHandle_t h, int g, const sl_conv_shape *sh,
                        const sl_graph_form *f);

#endif
