# Builds toolgate's images: static binaries on an empty base, run as a
# non-root user. `docker build .` gives the manager, `--target runner` the
# runner. hack/images assembles the same images without a Docker engine
# (docs/local-cluster.md).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
COPY pkg/ pkg/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/toolgate-runner ./cmd/toolgate-runner && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/toolgate-gateway ./cmd/toolgate-gateway

# The runner image (docker build --target runner): injected into tool pods.
FROM scratch AS runner
COPY --from=build /out/toolgate-runner /toolgate-runner
USER 65532:65532
ENTRYPOINT ["/toolgate-runner"]

# The manager image (the default target).
FROM scratch AS manager
COPY --from=build /out/manager /manager
# The MCP gateway (config/gateway runs it with command /toolgate-gateway).
COPY --from=build /out/toolgate-gateway /toolgate-gateway
# 65532 is the conventional "nonroot" user of distroless images.
USER 65532:65532
ENTRYPOINT ["/manager"]
