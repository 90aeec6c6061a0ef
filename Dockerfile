# syntax=docker/dockerfile:1
#
# The edge daemon as a static binary on a distroless base, running as a
# non-root user.
#
#   docker build -t geolimit/edge .
#   docker run --rm -p 8080:8080 -v "$PWD/edge.yaml:/etc/geolimit/edge.yaml:ro" \
#     geolimit/edge -config /etc/geolimit/edge.yaml
#
# The image runs the demo config when given no -config. Its listeners default
# to 127.0.0.1 like the binary's: a config for a container sets listen.api
# (and nats, gossip) to 0.0.0.0 with their secrets (api.token_file,
# gossip.secret_key_file, nats.embedded.config_file), or insecure: true.

ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static, reproducible: no cgo, no local paths; -buildvcs stamps the commit
# into `edge -version` when the build context holds .git.
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -ldflags="-s -w" -o /out/edge ./cmd/edge \
 && /out/edge -version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/edge /usr/local/bin/edge
USER nonroot:nonroot
# API, proxy, embedded NATS client and gateway, memberlist (TCP and UDP).
EXPOSE 8080 8000 4222 7222 7946 7946/udp
ENTRYPOINT ["/usr/local/bin/edge"]
