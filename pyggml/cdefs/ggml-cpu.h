/* From ggml-cpu.h: the CPU backend and its feature probes. */

struct ggml_backend * ggml_backend_cpu_init(void);
bool ggml_backend_is_cpu(struct ggml_backend * backend);
void ggml_backend_cpu_set_n_threads(struct ggml_backend * backend_cpu, int n_threads);
