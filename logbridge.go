package actorlb

import (
	"context"
	"log/slog"

	"github.com/sirupsen/logrus"
)

// logrusHandler forwards the actor library's slog records to logrus, one
// level down (its Info is chatty: dead letters, recoveries), so that at
// logrus Info only its warnings and errors show.
type logrusHandler struct {
	log   *logrus.Entry
	attrs []slog.Attr
}

func (h *logrusHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.log.Logger.IsLevelEnabled(level(l))
}

func level(l slog.Level) logrus.Level {
	switch {
	case l >= slog.LevelError:
		return logrus.ErrorLevel
	case l >= slog.LevelWarn:
		return logrus.WarnLevel
	case l >= slog.LevelInfo:
		return logrus.DebugLevel
	}
	return logrus.TraceLevel
}

func (h *logrusHandler) Handle(_ context.Context, r slog.Record) error {
	fields := logrus.Fields{}
	for _, a := range h.attrs {
		fields[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		fields[a.Key] = a.Value.String()
		return true
	})
	h.log.WithFields(fields).Log(level(r.Level), r.Message)
	return nil
}

func (h *logrusHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logrusHandler{log: h.log, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *logrusHandler) WithGroup(string) slog.Handler { return h }
