/* From ggml.h: types, contexts, tensors, graphs, type traits, quantization.
 * Hand-written: only what pyggml uses. Ellipses let the compiler fill in values. */

#define GGML_MAX_DIMS ...
#define GGML_MAX_NAME ...
#define GGML_MAX_SRC ...
#define GGML_ROPE_TYPE_NORMAL ...
#define GGML_ROPE_TYPE_NEOX ...
#define GGML_ROPE_TYPE_MROPE ...
#define GGML_ROPE_TYPE_VISION ...
#define GGML_ROPE_TYPE_IMROPE ...
#define GGML_MROPE_SECTIONS ...
#define GGML_DEFAULT_GRAPH_SIZE ...

enum ggml_type {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,
    GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q8_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_K, GGML_TYPE_IQ2_XXS,
    GGML_TYPE_IQ2_XS, GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ1_S, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ3_S,
    GGML_TYPE_IQ2_S, GGML_TYPE_IQ4_XS, GGML_TYPE_I8, GGML_TYPE_I16, GGML_TYPE_I32,
    GGML_TYPE_I64, GGML_TYPE_F64, GGML_TYPE_IQ1_M, GGML_TYPE_BF16, GGML_TYPE_TQ1_0,
    GGML_TYPE_TQ2_0, GGML_TYPE_MXFP4, GGML_TYPE_COUNT, ...
};

enum ggml_prec { GGML_PREC_DEFAULT, GGML_PREC_F32, ... };
enum ggml_op_hint { GGML_HINT_NONE, GGML_HINT_SRC0_IS_HADAMARD, ... };
enum ggml_sort_order { GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC, ... };
enum ggml_op_pool { GGML_OP_POOL_MAX, GGML_OP_POOL_AVG, ... };
enum ggml_scale_mode {
    GGML_SCALE_MODE_NEAREST, GGML_SCALE_MODE_BILINEAR, GGML_SCALE_MODE_BICUBIC,
    GGML_SCALE_FLAG_ALIGN_CORNERS, ...
};
enum ggml_op { GGML_OP_NONE, ... };
enum ggml_log_level { GGML_LOG_LEVEL_NONE, GGML_LOG_LEVEL_DEBUG, GGML_LOG_LEVEL_INFO,
                      GGML_LOG_LEVEL_WARN, GGML_LOG_LEVEL_ERROR, GGML_LOG_LEVEL_CONT, ... };
enum ggml_status { GGML_STATUS_ALLOC_FAILED, GGML_STATUS_FAILED, GGML_STATUS_SUCCESS,
                   GGML_STATUS_ABORTED, ... };

struct ggml_context;
struct ggml_cgraph;
struct ggml_backend_buffer;

struct ggml_init_params {
    size_t mem_size;
    void * mem_buffer;
    bool   no_alloc;
};

struct ggml_tensor {
    enum ggml_type type;
    struct ggml_backend_buffer * buffer;
    int64_t ne[4];
    size_t  nb[4];
    enum ggml_op op;
    int32_t flags;
    struct ggml_tensor * src[...];
    struct ggml_tensor * view_src;
    size_t view_offs;
    void * data;
    char name[...];
    ...;
};

typedef void (*ggml_to_float_t)(const void * x, float * y, int64_t k);

struct ggml_type_traits {
    const char * type_name;
    int64_t blck_size;
    size_t type_size;
    bool is_quantized;
    ggml_to_float_t to_float;
    ...;
};

void    ggml_free(struct ggml_context * ctx);
size_t  ggml_used_mem(const struct ggml_context * ctx);
size_t  ggml_get_mem_size(const struct ggml_context * ctx);
size_t  ggml_tensor_overhead(void);
size_t  ggml_graph_overhead_custom(size_t size, bool grads);
struct ggml_tensor * ggml_get_first_tensor(const struct ggml_context * ctx);
struct ggml_tensor * ggml_get_next_tensor(const struct ggml_context * ctx, struct ggml_tensor * tensor);

int64_t ggml_nelements(const struct ggml_tensor * tensor);
size_t  ggml_nbytes(const struct ggml_tensor * tensor);
int     ggml_n_dims(const struct ggml_tensor * tensor);
bool    ggml_is_contiguous(const struct ggml_tensor * tensor);
int64_t ggml_blck_size(enum ggml_type type);
size_t  ggml_type_size(enum ggml_type type);
size_t  ggml_row_size(enum ggml_type type, int64_t ne);
const char * ggml_type_name(enum ggml_type type);
const char * ggml_op_desc(const struct ggml_tensor * t);
bool    ggml_is_quantized(enum ggml_type type);
const struct ggml_type_traits * ggml_get_type_traits(enum ggml_type type);

struct ggml_tensor * ggml_set_name(struct ggml_tensor * tensor, const char * name);
void ggml_set_input(struct ggml_tensor * tensor);
void ggml_set_output(struct ggml_tensor * tensor);
bool ggml_prec_set_acc(struct ggml_tensor * a, enum ggml_prec prec);
void ggml_mul_mat_set_hint(struct ggml_tensor * a, enum ggml_op_hint hint);

int  ggml_graph_n_nodes(struct ggml_cgraph * cgraph);
struct ggml_tensor * ggml_graph_node(struct ggml_cgraph * cgraph, int i);
int  ggml_graph_size(struct ggml_cgraph * cgraph);

typedef void (*ggml_log_callback)(enum ggml_log_level level, const char * text, void * user_data);
void ggml_log_set(ggml_log_callback log_callback, void * user_data);

size_t ggml_quantize_chunk(enum ggml_type type, const float * src, void * dst, int64_t start,
                           int64_t nrows, int64_t n_per_row, const float * imatrix);
bool   ggml_quantize_requires_imatrix(enum ggml_type type);
