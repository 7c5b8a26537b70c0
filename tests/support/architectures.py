"""What each parity test's tiny checkpoints convert to: GGUF architectures, projector types."""

# Every registered architecture and projector is one of these (test_registry.py), and each
# table or name is what its parity test converts to, loads as that class and compares with
# transformers' own forward pass.

# each tiny checkpoint kind and the GGUF architecture it converts to (convert/test_parity.py)
TEXT_ARCHITECTURE_OF = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
                        "gemma2": "gemma2", "gemma3": "gemma3", "llama4": "llama4",
                        "gemma4": "gemma4", "gemma4_moe": "gemma4", "qwen3_moe": "qwen3moe",
                        "olmo2": "olmo2", "ministral3": "mistral3", "olmo3": "olmo2",
                        "deepseek_v2": "deepseek2", "deepseek_v3": "deepseek2",
                        "gemma3n": "gemma3n", "glm4_moe_lite": "deepseek2",
                        "granite": "granite", "granitemoe": "granitemoe",
                        "granitemoeshared": "granitemoe", "smollm3": "smollm3",
                        "seed_oss": "seed_oss", "mixtral": "llama",
                        "gpt_oss": "gpt-oss", "phi3": "phi3", "glm4": "glm4",
                        "cohere": "command-r", "cohere2": "cohere2",
                        "starcoder2": "starcoder2", "exaone4": "exaone4",
                        "gemma4_unified": "gemma4"}
# Qwen 3.5 and Qwen3-Next (convert/test_qwen35.py)
QWEN35_ARCHITECTURE_OF = {"qwen3_5": "qwen35", "qwen3_5_moe": "qwen35moe",
                          "qwen3_next": "qwen3next"}
# the text models of Qwen-VL checkpoints (convert/test_qwen_vl.py), and Ollama's single files
# of Qwen2.5-VL
QWEN_VL_ARCHITECTURE_OF = {"qwen2_5_vl": "qwen2vl", "qwen3_vl": "qwen3vl",
                           "qwen3_vl_moe": "qwen3vlmoe"}
QWEN_VL_OLLAMA_ARCHITECTURE = "qwen25vl"
BERT_ARCHITECTURE = "bert"                          # convert/test_bert.py
NOMIC_ARCHITECTURE = "nomic-bert"                   # convert/test_nomic.py
NOMIC_MOE_ARCHITECTURE = "nomic-bert-moe"
EMBEDDING_GEMMA_ARCHITECTURE = "gemma-embedding"    # convert/test_embedding_gemma.py
EMBEDDING_GEMMA_OLLAMA_ARCHITECTURE = "gemma3_embed"   # the class reading Ollama's layout
GPT_OSS_OLLAMA_ARCHITECTURE = "gptoss"              # older Ollama files' (convert/test_gpt_oss.py)
# Ollama's files' names for GLM-4.7-Flash (deepseek2, convert/test_deepseek2.py) and OLMo 3
# (olmo2, convert/test_olmo.py)
GLM4_MOE_LITE_OLLAMA_ARCHITECTURE = "glm4moelite"
OLMO3_OLLAMA_ARCHITECTURE = "olmo3"

# each tiny vision checkpoint kind and its clip.projector_type (vision/test_encoders.py)
PROJECTOR_OF = {"gemma3": "gemma3", "llava": "mlp", "gemma4": "gemma4v", "mistral3": "pixtral",
                "pixtral": "pixtral", "qwen2_5_vl": "qwen2.5vl_merger",
                "qwen2_vl": "qwen2vl_merger", "qwen3_vl": "qwen3vl_merger",
                "qwen3_5": "qwen3vl_merger"}
# Gemma 4 12B's towers, against transformers' embedders (vision/test_gemma4_unified.py)
UNIFIED_PROJECTORS = ("gemma4uv", "gemma4ua")
AUDIO_PROJECTOR = "gemma4a"     # the tiny checkpoint's clip.audio.projector_type (audio/)
