"""Generated protobuf and gRPC modules for `proto/replog/v1/*.proto` (do not edit; `make proto`)."""
