package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/actorlb/actorlb"
	lb "github.com/actorlb/actorlb/loadbalancer"
	"github.com/sirupsen/logrus"
)

// deleteServices deletes many services with one call (the engine's
// DeleteBatch): the body is an array of service IDs; the answer (200) has
// one result per ID, in order: 200 deleted, 404 no such service, 400 an
// invalid ID, or the status a DELETE /v1/service/{id} would have had.
func (s *Server) deleteServices(w http.ResponseWriter, r *http.Request) reply {
	var ids []int64
	if rr, ok := s.readJSON(w, r, &ids); !ok {
		return rr
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	svcs, err := s.engine.List(ctx)
	if err != nil {
		return engineError(err, 0)
	}
	frontendOf := make(map[lb.ServiceID]lb.L3n4Addr, len(svcs))
	for _, svc := range svcs {
		frontendOf[svc.Frontend.ID] = svc.Frontend.L3n4Addr
	}
	results := make([]BatchResult, len(ids))
	var frontends []lb.L3n4Addr
	var idx []int
	seen := map[int64]bool{}
	for i, id := range ids {
		results[i].ID = id
		fe, ok := frontendOf[lb.ServiceID(id)]
		switch {
		case id <= 0 || id > int64(lb.MaxServiceID):
			fe := &FieldError{Path: fmt.Sprintf("[%d]", i), Value: strconv.FormatInt(id, 10), Reason: "service ID must be between 1 and 65535"}
			results[i].Code, results[i].Error = http.StatusBadRequest, fe.Error()
		case seen[id]:
			results[i].Code, results[i].Error = http.StatusBadRequest, fmt.Sprintf("[%d]: service %d given twice", i, id)
		case !ok:
			results[i].Code, results[i].Error = http.StatusNotFound, fmt.Sprintf("service %d: %v", id, actorlb.ErrServiceNotFound)
		default:
			frontends, idx = append(frontends, fe), append(idx, i)
		}
		seen[id] = true
	}
	rs, err := s.engine.DeleteBatch(ctx, frontends)
	if err != nil {
		return engineError(err, 0)
	}
	deleted := 0
	for j, x := range rs {
		i := idx[j]
		switch {
		case errors.Is(x.Err, actorlb.ErrServiceNotFound):
			results[i].Code, results[i].Error = http.StatusNotFound, x.Err.Error()
		case x.Err != nil:
			rr := engineError(x.Err, http.StatusNotFound)
			results[i].Code, results[i].Error = rr.code, x.Err.Error()
		default:
			results[i].Code = http.StatusOK
			deleted++
		}
	}
	s.log.WithFields(logrus.Fields{"services": len(ids), "deleted": deleted}).Debug("service batch deleted")
	return reply{code: http.StatusOK, body: results}
}
