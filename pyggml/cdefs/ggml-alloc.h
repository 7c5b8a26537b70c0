/* From ggml-alloc.h: placing tensors in backend buffers. */

struct ggml_tallocr {
    struct ggml_backend_buffer * buffer;
    void * base;
    size_t alignment;
    size_t offset;
};

struct ggml_tallocr ggml_tallocr_new(struct ggml_backend_buffer * buffer);
enum ggml_status ggml_tallocr_alloc(struct ggml_tallocr * talloc, struct ggml_tensor * tensor);

struct ggml_backend_buffer * ggml_backend_alloc_ctx_tensors(struct ggml_context * ctx, struct ggml_backend * backend);
struct ggml_backend_buffer * ggml_backend_alloc_ctx_tensors_from_buft(struct ggml_context * ctx, struct ggml_backend_buffer_type * buft);
size_t ggml_backend_alloc_ctx_tensors_from_buft_size(struct ggml_context * ctx, struct ggml_backend_buffer_type * buft);
