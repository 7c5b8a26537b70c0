/* From ggml-cpu.h: the CPU backend and its feature probes. */

struct ggml_backend * ggml_backend_cpu_init(void);
bool ggml_backend_is_cpu(struct ggml_backend * backend);
void ggml_backend_cpu_set_n_threads(struct ggml_backend * backend_cpu, int n_threads);

/* ggml's own thread pool (used when ggml was built without OpenMP): made once per CPU
   backend, its threads wait for each graph instead of being made for it */
struct ggml_threadpool;
struct ggml_threadpool_params {
    int n_threads;
    uint32_t poll;
    bool paused;
    ...;
};
struct ggml_threadpool_params ggml_threadpool_params_default(int n_threads);
struct ggml_threadpool * ggml_threadpool_new(struct ggml_threadpool_params * params);
void ggml_threadpool_free(struct ggml_threadpool * threadpool);
void ggml_backend_cpu_set_threadpool(struct ggml_backend * backend_cpu, struct ggml_threadpool * threadpool);
void ggml_backend_cpu_set_abort_callback(struct ggml_backend * backend_cpu,
                                         bool (*abort_callback)(void * data),
                                         void * abort_callback_data);
