//! MLX (mlx-community) folders: safetensors shards whose quantized linears are packed triples.
