/* pyggml's own C helpers (defined in _build.py): the error path for guarded calls. */

const char * pyggml_take_error(void);   /* the message of the last failed guarded call, or NULL */
void pyggml_install_abort_hook(void);

/* a graph's operands kept or put back (see _build.py), and compute memory forgotten */
void pyggml_graph_operands(struct ggml_cgraph * graph, int n, struct ggml_tensor ** saved,
                           int restore);
int pyggml_max_src(void);
void pyggml_detach(struct ggml_context * ctx, struct ggml_backend_buffer ** kept, int n_kept);

/* a scheduler's compute thread (see compute_thread.c, pyggml/worker.py) */
typedef struct pyggml_copy {
    struct ggml_tensor * tensor;
    void * data;
    size_t size;
} pyggml_copy;
typedef struct pyggml_compute_thread pyggml_compute_thread;
pyggml_compute_thread * pyggml_compute_thread_new(void);
long long pyggml_compute_thread_submit(pyggml_compute_thread * t,
                                       struct ggml_backend_sched * sched,
                                       struct ggml_cgraph * graph,
                                       const pyggml_copy * inputs, int n_inputs,
                                       const pyggml_copy * outputs, int n_outputs);
int pyggml_compute_thread_done(pyggml_compute_thread * t, long long ticket);
int pyggml_compute_thread_collect(pyggml_compute_thread * t, long long ticket);
void pyggml_compute_thread_free(pyggml_compute_thread * t);
int pyggml_compute_threads_alive(void);

/* ggml's log lines, delivered to Python's logging (pyggml/log.py) */
extern "Python" void pyggml_on_log(enum ggml_log_level level, const char * text, void * user);

/* the scheduler's per-node callback, for timing each node (pyggml/profile.py) */
extern "Python" bool pyggml_on_eval(struct ggml_tensor * t, bool ask, void * user_data);
