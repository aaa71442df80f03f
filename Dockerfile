# Builds toolgate's images: static binaries on an empty base, run as a
# non-root user. `docker build .` gives the manager, `--target runner` the
# runner. The daemonless path, hack/images (no Docker engine;
# docs/local-cluster.md), executes this file: it runs the build stage's go
# builds as written and assembles each FROM scratch stage from its COPY,
# USER and ENTRYPOINT, refusing any instruction it does not follow
# (hack/images/dockerfile.go). Keep the golang tag the Go release in use
# (hack/images warns when the local Go differs): the same Go with -trimpath
# and -buildvcs=false (a checkout has .git, the context does not) gives the
# same binaries.
FROM golang:1.26.8 AS build
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
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/manager ./cmd/manager && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/toolgate-runner ./cmd/toolgate-runner && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/toolgate-gateway ./cmd/toolgate-gateway && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/toolgate-egress ./cmd/toolgate-egress

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
# The egress proxy (config/egress runs it with command /toolgate-egress).
COPY --from=build /out/toolgate-egress /toolgate-egress
# 65532 is the conventional "nonroot" user of distroless images.
USER 65532:65532
ENTRYPOINT ["/manager"]
