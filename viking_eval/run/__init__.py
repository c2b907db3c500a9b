"""The experiment loop: store loading, evaluating a retriever, the retriever contract, resume keys, latency, ANN quality, the artifact cache."""
