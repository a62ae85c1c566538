//! GGUF reading and import (being written).
