"""Answers 503 "Loading model" for a moment, then fails to load the model and exits with status 1."""
import os
import threading
import time

import standin


def fail_loading():
    time.sleep(0.3)
    standin.log("llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' has wrong shape")
    standin.log("srv    load_model: failed to load model, 'standin.gguf'")
    os._exit(1)


args = standin.parse_args()
standin.start(args)
threading.Thread(target=fail_loading, daemon=True).start()
standin.serve(args, health=standin.loading_for(3600))
