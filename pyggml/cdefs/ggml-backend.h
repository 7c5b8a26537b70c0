/* From ggml-backend.h: devices, backends, buffers, the scheduler. */

struct ggml_backend;
struct ggml_backend_buffer_type;
struct ggml_backend_device;
struct ggml_backend_reg;
struct ggml_backend_sched;

enum ggml_backend_dev_type {
    GGML_BACKEND_DEVICE_TYPE_CPU, GGML_BACKEND_DEVICE_TYPE_GPU, GGML_BACKEND_DEVICE_TYPE_IGPU,
    GGML_BACKEND_DEVICE_TYPE_ACCEL, ...
};

enum ggml_backend_buffer_usage {
    GGML_BACKEND_BUFFER_USAGE_ANY, GGML_BACKEND_BUFFER_USAGE_WEIGHTS,
    GGML_BACKEND_BUFFER_USAGE_COMPUTE, ...
};

struct ggml_backend_feature {
    const char * name;
    const char * value;
};

typedef struct ggml_backend_feature * (*ggml_backend_get_features_t)(struct ggml_backend_reg * reg);
typedef struct ggml_backend_buffer_type ** (*ggml_backend_dev_get_extra_bufts_t)(struct ggml_backend_device * device);

const char * ggml_backend_name(struct ggml_backend * backend);
void ggml_backend_free(struct ggml_backend * backend);
struct ggml_backend_device * ggml_backend_get_device(struct ggml_backend * backend);
void ggml_backend_synchronize(struct ggml_backend * backend);
bool ggml_backend_supports_op(struct ggml_backend * backend, const struct ggml_tensor * op);
struct ggml_backend_buffer_type * ggml_backend_get_default_buffer_type(struct ggml_backend * backend);

const char * ggml_backend_buft_name(struct ggml_backend_buffer_type * buft);
bool ggml_backend_buft_is_host(struct ggml_backend_buffer_type * buft);
size_t ggml_backend_buft_get_alignment(struct ggml_backend_buffer_type * buft);
size_t ggml_backend_buft_get_max_size(struct ggml_backend_buffer_type * buft);
size_t ggml_backend_buft_get_alloc_size(struct ggml_backend_buffer_type * buft, const struct ggml_tensor * tensor);
struct ggml_backend_device * ggml_backend_buft_get_device(struct ggml_backend_buffer_type * buft);

const char * ggml_backend_buffer_name(struct ggml_backend_buffer * buffer);
void   ggml_backend_buffer_free(struct ggml_backend_buffer * buffer);
void * ggml_backend_buffer_get_base(struct ggml_backend_buffer * buffer);
size_t ggml_backend_buffer_get_size(struct ggml_backend_buffer * buffer);
void   ggml_backend_buffer_clear(struct ggml_backend_buffer * buffer, uint8_t value);
bool   ggml_backend_buffer_is_host(struct ggml_backend_buffer * buffer);
void   ggml_backend_buffer_set_usage(struct ggml_backend_buffer * buffer, enum ggml_backend_buffer_usage usage);
enum ggml_backend_buffer_usage ggml_backend_buffer_get_usage(struct ggml_backend_buffer * buffer);
struct ggml_backend_buffer_type * ggml_backend_buffer_get_type(struct ggml_backend_buffer * buffer);
struct ggml_backend_buffer * ggml_backend_buft_alloc_buffer(struct ggml_backend_buffer_type * buft, size_t size);
enum ggml_status ggml_backend_view_init(struct ggml_tensor * tensor);
enum ggml_status ggml_backend_tensor_alloc(struct ggml_backend_buffer * buffer, struct ggml_tensor * tensor, void * addr);
struct ggml_backend_buffer * ggml_backend_cpu_buffer_from_ptr(void * ptr, size_t size);

void ggml_backend_tensor_set(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
void ggml_backend_tensor_get(const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);

size_t ggml_backend_dev_count(void);
struct ggml_backend_device * ggml_backend_dev_get(size_t index);
struct ggml_backend_device * ggml_backend_dev_by_type(enum ggml_backend_dev_type type);
const char * ggml_backend_dev_name(struct ggml_backend_device * device);
const char * ggml_backend_dev_description(struct ggml_backend_device * device);
void ggml_backend_dev_memory(struct ggml_backend_device * device, size_t * free, size_t * total);
enum ggml_backend_dev_type ggml_backend_dev_type(struct ggml_backend_device * device);
struct ggml_backend_reg * ggml_backend_dev_backend_reg(struct ggml_backend_device * device);
struct ggml_backend * ggml_backend_dev_init(struct ggml_backend_device * device, const char * params);
struct ggml_backend_buffer_type * ggml_backend_dev_buffer_type(struct ggml_backend_device * device);
struct ggml_backend_buffer_type * ggml_backend_dev_host_buffer_type(struct ggml_backend_device * device);
bool ggml_backend_dev_supports_op(struct ggml_backend_device * device, const struct ggml_tensor * op);

size_t ggml_backend_reg_count(void);
struct ggml_backend_reg * ggml_backend_reg_get(size_t index);
const char * ggml_backend_reg_name(struct ggml_backend_reg * reg);
void * ggml_backend_reg_get_proc_address(struct ggml_backend_reg * reg, const char * name);
struct ggml_backend_reg * ggml_backend_reg_by_name(const char * name);
size_t ggml_backend_reg_dev_count(struct ggml_backend_reg * reg);
struct ggml_backend_device * ggml_backend_reg_dev_get(struct ggml_backend_reg * reg, size_t index);
void ggml_backend_register(struct ggml_backend_reg * reg);

struct ggml_backend_sched * ggml_backend_sched_new(struct ggml_backend ** backends, struct ggml_backend_buffer_type ** bufts, int n_backends, size_t graph_size, bool parallel, bool op_offload);
void ggml_backend_sched_free(struct ggml_backend_sched * sched);
bool ggml_backend_sched_reserve(struct ggml_backend_sched * sched, struct ggml_cgraph * measure_graph);
void ggml_backend_sched_reserve_size(struct ggml_backend_sched * sched, struct ggml_cgraph * measure_graph, size_t * sizes);
bool ggml_backend_sched_alloc_graph(struct ggml_backend_sched * sched, struct ggml_cgraph * graph);
enum ggml_status ggml_backend_sched_graph_compute_async(struct ggml_backend_sched * sched, struct ggml_cgraph * graph);
void ggml_backend_sched_synchronize(struct ggml_backend_sched * sched);
void ggml_backend_sched_reset(struct ggml_backend_sched * sched);
void ggml_backend_sched_set_tensor_backend(struct ggml_backend_sched * sched, struct ggml_tensor * node, struct ggml_backend * backend);
struct ggml_backend * ggml_backend_sched_get_tensor_backend(struct ggml_backend_sched * sched, struct ggml_tensor * node);
int  ggml_backend_sched_get_n_splits(struct ggml_backend_sched * sched);
size_t ggml_backend_sched_get_buffer_size(struct ggml_backend_sched * sched, struct ggml_backend * backend);

/* ggml-rpc.h, reached through the RPC registry's get_proc_address (a build without RPC has none) */
typedef struct ggml_backend_reg * (*ggml_backend_rpc_add_server_t)(const char * endpoint);
typedef void (*ggml_backend_rpc_start_server_t)(const char * endpoint, const char * cache_dir, size_t n_threads, size_t n_devices, struct ggml_backend_device ** devices);
typedef bool (*ggml_backend_rpc_connection_lost_t)(const char * endpoint);

typedef bool (*ggml_backend_sched_eval_callback)(struct ggml_tensor * t, bool ask, void * user_data);
void ggml_backend_sched_set_eval_callback(struct ggml_backend_sched * sched, ggml_backend_sched_eval_callback callback, void * user_data);
